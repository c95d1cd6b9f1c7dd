// The HTTP/1.1 server: one io_context run by `io_threads` threads, a strand per connection, a
// worker pool for handlers, and one session template for TLS and plain connections.
//
// A connection's life, all on its strand: [TLS handshake] -> read a request (header and body, with
// limits) -> hand it to the worker pool -> the handler's Response comes back through the strand ->
// write it -> read the next request (keep-alive) or close. A streamed response writes its header and
// then whatever the producer pushes; a read stays pending meanwhile so that a client that goes away
// is noticed at once.
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "net/http_util.h"
#include "net/net.h"

namespace cnlab::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// How long a closing connection waits for the client to finish sending (so that the client reads
// our error response instead of a reset), and how much it reads meanwhile.
constexpr std::chrono::seconds kLingerTimeout{5};
constexpr size_t kLingerBytes = 16 << 20;
// Connections over max_connections still get a 503 up to this many at a time; beyond, a close.
constexpr size_t kMaxOverflowSessions = 64;
constexpr std::chrono::seconds kStopGrace{3};

class SessionBase;
class StreamImpl;

// A task for the worker pool: run the session's handler, or start its stream's producer.
struct Task {
  std::shared_ptr<SessionBase> session;
  bool start_stream = false;
};

class WorkerPool {
 public:
  void start(int threads);
  // False once stopped (the task is dropped).
  bool post(Task task);
  // Runs what is running to its end, drops what is queued, joins. Idempotent.
  void stop();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// What the server and its sessions share; sessions hold it, so it outlives them all.
struct Shared {
  ServerOptions options;
  Handler handler;
  std::unique_ptr<ssl::context> tls;  // null for plain HTTP
  WorkerPool pool;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> overflow{0};

  std::mutex mu;
  std::condition_variable sessions_gone;
  bool stopping = false;  // under mu; also mirrored in stopping_flag for lock-free reads
  std::atomic<bool> stopping_flag{false};
  std::atomic<uint64_t> next_id{0};
  std::unordered_map<uint64_t, std::weak_ptr<SessionBase>> sessions;
  std::unordered_map<uint64_t, std::weak_ptr<StreamImpl>> streams;
};

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  // On a worker thread: runs the handler, or the stream producer's start.
  virtual void run_task(bool start_stream) = 0;
  // On the strand: writes what the stream has queued.
  virtual void kick() = 0;
  // On the strand: closes the connection now.
  virtual void hard_close() = 0;
  // Any thread: closes the connection on the strand.
  virtual void abort() = 0;
  // On the strand, once: the handshake (TLS) and the first read.
  virtual void start() = 0;
  virtual const boost::asio::any_io_executor& executor() const = 0;
};

// The producer's side of a streamed response. Pushed chunks are framed into `outbox_` at once;
// the session swaps the outbox out and writes it, so a stream holds at most one write's worth plus
// the backlog limit.
class StreamImpl final : public Stream {
 public:
  StreamImpl(asio::any_io_executor strand, std::weak_ptr<SessionBase> session, size_t max_backlog)
      : strand_(std::move(strand)), session_(std::move(session)), max_backlog_(max_backlog) {}

  bool push(std::string chunk) override {
    std::lock_guard lock(mu_);
    if (closed_ || finished_) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the body
    if (outbox_.size() + inflight_bytes_ + chunk.size() > max_backlog_) {
      // The reader is too slow: cut it off rather than grow without bound.
      closed_ = true;
      post_locked([](SessionBase& session) { session.hard_close(); });
      return false;
    }
    char size[20];
    auto end = std::to_chars(size, size + sizeof(size), chunk.size(), 16).ptr;
    outbox_.append(size, end).append("\r\n").append(chunk).append("\r\n");
    schedule_locked();
    return true;
  }

  void finish() override {
    std::lock_guard lock(mu_);
    if (closed_ || finished_) return;
    finished_ = true;
    outbox_.append("0\r\n\r\n");
    schedule_locked();
  }

  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_ || finished_;
  }

  void on_close(std::function<void()> callback) override {
    if (!callback) return;
    {
      std::lock_guard lock(mu_);
      if (!fired_) {
        callbacks_.push_back(std::move(callback));
        return;
      }
    }
    callback();
  }

  // Marks the stream closed and runs the on_close callbacks, once. Drops the strand so that
  // nothing reaches the io_context after this (it may be destroyed while the producer still holds
  // the stream).
  void close_now() {
    std::vector<std::function<void()>> callbacks;
    asio::any_io_executor strand;
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      if (fired_) return;
      fired_ = true;
      callbacks.swap(callbacks_);
      strand = std::move(strand_);
      strand_ = asio::any_io_executor();
    }
    for (auto& callback : callbacks) {
      try {
        callback();
      } catch (const std::exception& e) {
        spdlog::error("stream on_close callback threw error=\"{}\"", e.what());
      } catch (...) {
        spdlog::error("stream on_close callback threw");
      }
    }
  }

  // For the session's strand: takes what is queued (into `out`, whose old contents it keeps as
  // the next outbox), or reports that nothing is (and whether the stream is finished).
  bool take(std::string& out, bool& finished) {
    std::lock_guard lock(mu_);
    finished = finished_;
    if (outbox_.empty()) {
      scheduled_ = false;
      return false;
    }
    out.clear();
    out.swap(outbox_);
    inflight_bytes_ = out.size();
    return true;
  }

  void written() {
    std::lock_guard lock(mu_);
    inflight_bytes_ = 0;
  }

  // For the session's strand, before the first kick: the response header goes first.
  void start(std::string head) {
    std::lock_guard lock(mu_);
    outbox_ = std::move(head);
    scheduled_ = true;
  }

 private:
  void schedule_locked() {
    if (scheduled_) return;
    scheduled_ = true;
    post_locked([](SessionBase& session) { session.kick(); });
  }

  template <typename F>
  void post_locked(F f) {
    if (!strand_) return;
    asio::post(strand_, [weak = session_, f] {
      if (auto session = weak.lock()) f(*session);
    });
  }

  mutable std::mutex mu_;
  asio::any_io_executor strand_;
  std::weak_ptr<SessionBase> session_;
  const size_t max_backlog_;
  std::string outbox_;
  size_t inflight_bytes_ = 0;
  bool scheduled_ = false;  // a kick is posted or a write is in flight: the strand will look again
  bool finished_ = false;
  bool closed_ = false;
  bool fired_ = false;
  std::vector<std::function<void()>> callbacks_;
};

void WorkerPool::start(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

bool WorkerPool::post(Task task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::stop() {
  std::deque<Task> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void WorkerPool::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task.session->run_task(task.start_stream);
    } catch (const std::exception& e) {
      spdlog::error("net worker caught error=\"{}\"", e.what());
      task.session->abort();
    }
  }
}

std::string_view reason_phrase(int status) {
  auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  if (reason.empty() || reason.front() == '<') return "Unknown";
  return {reason.data(), reason.size()};
}

bool iequals(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()), beast::string_view(b.data(), b.size()));
}

void append_number(std::string& out, size_t value) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  out.append(digits, end);
}

// The status line and header block of `response` into `out`.
// `announce_keep_alive` is for HTTP/1.0 clients, which close unless told otherwise.
void format_head(std::string& out, const Response& response, int status, std::optional<size_t> content_length,
                 bool chunked, bool close, bool announce_keep_alive = false) {
  out.clear();
  out.append("HTTP/1.1 ");
  append_number(out, static_cast<size_t>(status));
  out.push_back(' ');
  out.append(reason_phrase(status));
  out.append("\r\n");
  if (!response.content_type.empty() && detail::valid_header_value(response.content_type)) {
    out.append("Content-Type: ").append(response.content_type).append("\r\n");
  }
  if (content_length) {
    out.append("Content-Length: ");
    append_number(out, *content_length);
    out.append("\r\n");
  }
  if (chunked) out.append("Transfer-Encoding: chunked\r\n");
  if (close) {
    out.append("Connection: close\r\n");
  } else if (announce_keep_alive) {
    out.append("Connection: keep-alive\r\n");
  }
  for (const auto& [name, value] : response.headers) {
    // The framing is ours; a header that would break it is dropped.
    if (!detail::valid_header_name(name) || !detail::valid_header_value(value)) continue;
    if (iequals(name, "content-length") || iequals(name, "transfer-encoding") || iequals(name, "connection") ||
        iequals(name, "content-type")) {
      continue;
    }
    out.append(name).append(": ").append(value).append("\r\n");
  }
  out.append("\r\n");
}

Response error_response(int status, std::string_view code, std::string_view message) {
  Response response;
  response.status = status;
  response.body = detail::error_body(code, message);
  return response;
}

std::string endpoint_text(const tcp::endpoint& endpoint) {
  auto address = endpoint.address();
  std::string host = address.to_string();
  if (address.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(endpoint.port());
}

template <typename AsyncStream>
class Session final : public SessionBase {
  static constexpr bool kTls = !std::is_same_v<AsyncStream, beast::tcp_stream>;

 public:
  Session(std::shared_ptr<Shared> shared, tcp::socket socket, uint64_t id, bool overflow)
      : shared_(std::move(shared)), stream_(make_stream(std::move(socket))), id_(id), overflow_(overflow) {
    executor_ = stream_.get_executor();
    error_code ec;
    auto remote = lowest().socket().remote_endpoint(ec);
    if (!ec) req_.remote = endpoint_text(remote);
  }

  ~Session() override {
    if (stream_impl_) stream_impl_->close_now();
    file_parser_.reset();
    drop_spool();
    close_body_file();
    std::lock_guard lock(shared_->mu);
    shared_->sessions.erase(id_);
    shared_->streams.erase(id_);
    if (overflow_) {
      --shared_->overflow;
    } else {
      --shared_->connections;
    }
    if (shared_->sessions.empty()) shared_->sessions_gone.notify_all();
  }

  void start() override {
    if constexpr (kTls) {
      lowest().expires_after(std::min<std::chrono::steady_clock::duration>(shared_->options.idle_timeout,
                                                                           std::chrono::seconds(30)));
      stream_.async_handshake(ssl::stream_base::server, [self = self()](error_code ec) {
        if (self->closed_) return;
        if (ec) {
          self->hard_close();
          return;
        }
        self->after_handshake();
      });
    } else {
      after_handshake();
    }
  }

  void run_task(bool start_stream) override {
    if (start_stream) {
      auto start = std::move(response_.start_stream);
      try {
        start(stream_impl_);
      } catch (const std::exception& e) {
        spdlog::error("stream start threw path=\"{}\" error=\"{}\"", req_.path, e.what());
        abort();
      } catch (...) {
        spdlog::error("stream start threw path=\"{}\"", req_.path);
        abort();
      }
      return;
    }
    try {
      response_ = shared_->handler(req_);
    } catch (const std::exception& e) {
      spdlog::error("handler threw method={} path=\"{}\" error=\"{}\"", req_.method, req_.path, e.what());
      response_ = error_response(500, "internal", "the server failed while handling the request");
    } catch (...) {
      spdlog::error("handler threw method={} path=\"{}\"", req_.method, req_.path);
      response_ = error_response(500, "internal", "the server failed while handling the request");
    }
    asio::post(executor_, [self = self()] { self->on_response(); });
  }

  void kick() override {
    if (closed_ || writing_ || !stream_impl_ || coalescing_) return;
    // A busy stream writes at most once per `stream_coalesce`: what is pushed meanwhile goes out
    // in one write (one TLS record and one syscall instead of one per event).
    auto delay = shared_->options.stream_coalesce;
    auto now = std::chrono::steady_clock::now();
    if (delay.count() > 0 && now - last_write_ < delay) {
      coalescing_ = true;
      if (!coalesce_timer_) coalesce_timer_.emplace(executor_);
      coalesce_timer_->expires_at(last_write_ + delay);
      coalesce_timer_->async_wait([self = self()](error_code ec) {
        self->coalescing_ = false;
        if (!ec) self->kick();
      });
      return;
    }
    last_write_ = now;
    bool finished = false;
    if (!stream_impl_->take(inflight_, finished)) {
      if (finished) {
        // Everything is written, the terminating chunk too: the response is complete.
        stream_impl_->close_now();
        hard_close();
      }
      return;
    }
    writing_ = true;
    lowest().expires_after(shared_->options.idle_timeout);  // the pending read keeps no timeout
    asio::async_write(stream_, asio::buffer(inflight_), [self = self()](error_code ec, size_t) {
      self->writing_ = false;
      if (self->closed_) return;
      if (ec) {
        self->hard_close();
        return;
      }
      self->stream_impl_->written();
      self->kick();
    });
  }

  void hard_close() override {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
    if (stream_impl_) stream_impl_->close_now();
  }

  void abort() override {
    asio::post(executor_, [self = self()] { self->hard_close(); });
  }

  const asio::any_io_executor& executor() const override { return executor_; }

 private:
  std::shared_ptr<Session> self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  AsyncStream make_stream(tcp::socket socket) {
    if constexpr (kTls) {
      return AsyncStream(std::move(socket), *shared_->tls);
    } else {
      return AsyncStream(std::move(socket));
    }
  }

  void after_handshake() {
    if constexpr (kTls) {
      if (!shared_->options.client_ca_file.empty()) req_.peer_dns_names = detail::peer_dns_names(stream_.native_handle());
    }
    if (overflow_) {
      respond_error(503, "unavailable", "the server has too many connections; try again later");
      return;
    }
    do_read();
  }

  void do_read() {
    if (shared_->stopping_flag.load(std::memory_order_relaxed)) {
      hard_close();
      return;
    }
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(shared_->options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    body_limit_ = shared_->options.max_body_bytes;
    parser_->body_limit(body_limit_);
    lowest().expires_after(shared_->options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = self()](error_code ec, size_t) { self->on_header(ec); });
  }

  // The header is in (and within its limit, and a declared length within the body limit); reads the
  // body, into a spool file where the route asks for one, first answering "Expect: 100-continue"
  // as clients such as curl wait for it.
  void on_header(error_code ec) {
    if (closed_) return;
    if (ec || parser_->is_done()) {
      on_read(ec);
      return;
    }
    const auto& head = parser_->get();
    take_head(head);
    if (shared_->options.admit) {
      if (auto refusal = shared_->options.admit(req_)) {
        response_ = std::move(*refusal);
        response_.body_file.clear();
        response_.start_stream = nullptr;
        head_ = false;
        write_response(/*close=*/true, /*linger=*/true);
        return;
      }
    }
    const std::string& method = req_.method;
    const std::string& path = req_.path;
    body_limit_ = shared_->options.max_body_bytes;
    if (shared_->options.body_limit_for) {
      body_limit_ = std::min(body_limit_, shared_->options.body_limit_for(method, path, req_.headers));
      parser_->body_limit(body_limit_);
    }
    // Also what keeps a spooled body read past the parser (read_raw_body) within the limit.
    if (auto length = parser_->content_length(); length && *length > body_limit_) {
      respond_error(413, "too_large",
                    "the request body is larger than the limit of " + std::to_string(body_limit_) + " bytes");
      return;
    }
    const bool expects_continue = beast::iequals(head[http::field::expect], "100-continue");
    if (shared_->options.spool_dir_for) {
      if (std::string dir = shared_->options.spool_dir_for(method, path); !dir.empty() && !start_spool(dir)) {
        respond_error(500, "internal", "the server cannot store the request body");
        return;
      }
    }
    if (expects_continue) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = self()](error_code write_ec, size_t) {
                          if (self->closed_) return;
                          if (write_ec) {
                            self->hard_close();
                            return;
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  // From here the body goes to a new file in `dir` (0600) as it arrives, not to memory.
  bool start_spool(const std::string& dir) {
    static std::atomic<uint64_t> spooled{0};
    spool_path_ = dir + "/.request-" + std::to_string(::getpid()) + "-" + std::to_string(id_) + "-" +
                  std::to_string(spooled.fetch_add(1));
    if (auto length = parser_->content_length(); length && !parser_->chunked()) {
      // A declared length: read straight into the file a MiB at a time (read_raw_body). Beast's
      // parser reads 64 KiB at a time with a timer and a strand hop per read, which caps an upload
      // at about 200 MB/s here, TLS or not.
      spool_fd_ = ::open(spool_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (spool_fd_ < 0) {
        spdlog::error("request body not spooled path=\"{}\" error=\"{}\"", spool_path_, std::strerror(errno));
        drop_spool();
        return false;
      }
      spool_left_ = *length;
      spool_hash_.reset(EVP_MD_CTX_new());
      if (!spool_hash_ || EVP_DigestInit_ex(spool_hash_.get(), EVP_sha256(), nullptr) != 1) spool_hash_.reset();
      return true;
    }
    file_parser_.emplace(std::move(*parser_));
    parser_.reset();
    file_parser_->body_limit(body_limit_);
    error_code ec;
    file_parser_->get().body().open(spool_path_.c_str(), beast::file_mode::write_new, ec);
    if (!ec && ::fchmod(file_parser_->get().body().file().native_handle(), 0600) != 0) {
      ec = error_code(errno, boost::system::system_category());
    }
    if (ec) {
      spdlog::error("request body not spooled path=\"{}\" error=\"{}\"", spool_path_, ec.message());
      file_parser_.reset();
      drop_spool();
      return false;
    }
    return true;
  }

  // Removes the spool file unless the handler moved it away.
  void drop_spool() {
    if (spool_fd_ >= 0) ::close(spool_fd_);
    spool_fd_ = -1;
    spool_hash_.reset();
    req_.body_sha256.clear();
    if (spool_path_.empty()) return;
    ::unlink(spool_path_.c_str());
    spool_path_.clear();
    req_.body_file.clear();
  }

  // A spooled body of known length: what came with the header, then the rest a MiB at a time.
  void read_raw_body() {
    const size_t with_header = static_cast<size_t>(std::min<uint64_t>(buffer_.size(), spool_left_));
    if (with_header > 0 && !write_spool(static_cast<const char*>(buffer_.data().data()), with_header)) return;
    buffer_.consume(with_header);
    continue_raw_body();
  }

  void continue_raw_body() {
    if (spool_left_ == 0) {
      ::close(std::exchange(spool_fd_, -1));
      unsigned char digest[EVP_MAX_MD_SIZE];
      unsigned int size = 0;
      if (spool_hash_ && EVP_DigestFinal_ex(spool_hash_.get(), digest, &size) == 1) {
        static constexpr char kHex[] = "0123456789abcdef";
        for (unsigned int i = 0; i < size; ++i) {
          req_.body_sha256.push_back(kHex[digest[i] >> 4]);
          req_.body_sha256.push_back(kHex[digest[i] & 0xf]);
        }
      }
      spool_hash_.reset();
      on_read({});
      return;
    }
    if (piece_.size() < (size_t{1} << 20)) piece_.resize(size_t{1} << 20);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(piece_.size(), spool_left_));
    lowest().expires_after(shared_->options.idle_timeout);
    asio::async_read(stream_, asio::buffer(piece_.data(), want), [self = self()](error_code ec, size_t n) {
      if (self->closed_) return;
      if (ec) {
        self->drop_spool();
        self->hard_close();  // the client went away or stalled mid-body
        return;
      }
      if (self->write_spool(self->piece_.data(), n)) self->continue_raw_body();
    });
  }

  bool write_spool(const char* data, size_t size) {
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(spool_fd_, data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        spdlog::error("request body not spooled path=\"{}\" error=\"{}\"", spool_path_, std::strerror(errno));
        drop_spool();
        respond_error(500, "internal", "the server cannot store the request body");
        return false;
      }
      done += static_cast<size_t>(n);
    }
    if (spool_hash_ && EVP_DigestUpdate(spool_hash_.get(), data, size) != 1) spool_hash_.reset();
    spool_left_ -= size;
    return true;
  }

  void read_body() {
    if (spool_fd_ >= 0) {
      read_raw_body();
      return;
    }
    auto done = [self = self()](error_code ec, size_t) { self->on_read(ec); };
    if (file_parser_) {
      http::async_read(stream_, buffer_, *file_parser_, std::move(done));
    } else {
      http::async_read(stream_, buffer_, *parser_, std::move(done));
    }
  }

  void on_read(error_code ec) {
    if (closed_) return;
    if (ec) {
      file_parser_.reset();
      drop_spool();
      if (ec.category() != http::make_error_code(http::error::end_of_stream).category() ||
          ec == http::error::end_of_stream || ec == http::error::partial_message ||
          ec == http::error::short_read) {
        hard_close();  // the client went away, timed out, or broke the connection
      } else if (ec == http::error::body_limit) {
        respond_error(413, "too_large", "the request body is larger than the limit of " + std::to_string(body_limit_) + " bytes");
      } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        respond_error(431, "too_large",
                      "the request header is larger than the limit of " +
                          std::to_string(shared_->options.max_header_bytes) + " bytes");
      } else {
        respond_error(400, "invalid_argument", "malformed HTTP request: " + ec.message());
      }
      return;
    }
    if (file_parser_) {
      auto& message = file_parser_->get();
      take_head(message);
      message.body().close();
      req_.body.clear();
      req_.body_file = spool_path_;
      file_parser_.reset();
    } else if (!spool_path_.empty()) {  // read by read_raw_body
      take_head(parser_->get());
      req_.body.clear();
      req_.body_file = spool_path_;
      parser_.reset();
    } else {
      auto& message = parser_->get();
      take_head(message);
      req_.body = std::move(message.body());
      parser_.reset();
    }
    if (!shared_->pool.post(Task{self(), false})) hard_close();
  }

  template <typename Message>
  void take_head(const Message& message) {
    req_.method.assign(message.method_string().data(), message.method_string().size());
    req_.target.assign(message.target().data(), message.target().size());
    detail::decode_target(req_);
    req_.headers.clear();
    for (const auto& field : message) {
      std::string name(field.name_string().data(), field.name_string().size());
      for (char& c : name) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      auto value = field.value();
      auto [it, inserted] = req_.headers.try_emplace(std::move(name), value.data(), value.size());
      if (!inserted) it->second.append(", ").append(value.data(), value.size());
    }
    keep_alive_ = message.keep_alive();
    http10_ = message.version() < 11;
    head_ = message.method() == http::verb::head;
  }

  void on_response() {
    req_.body = std::string();  // an upload is not kept while the connection idles
    drop_spool();
    if (closed_) return;
    if (response_.start_stream) {
      begin_stream();
      return;
    }
    bool close = !keep_alive_ || shared_->stopping_flag.load(std::memory_order_relaxed);
    if (!response_.body_file.empty()) {
      write_file_response(close);
      return;
    }
    write_response(close, /*linger=*/close);
  }

  // A body from a file: the head, then the file a piece at a time, one buffer per write.
  void write_file_response(bool close) {
    int fd = ::open(response_.body_file.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      spdlog::error("response body file unreadable path=\"{}\" file=\"{}\" error=\"{}\"", req_.path,
                    response_.body_file, std::strerror(errno));
      if (fd >= 0) ::close(fd);
      response_ = error_response(500, "internal", "the server cannot read the response's body");
      write_response(close, /*linger=*/close);
      return;
    }
    body_fd_ = fd;
    body_left_ = head_ ? 0 : static_cast<size_t>(info.st_size);
    const int status = response_.status >= 200 && response_.status <= 999 ? response_.status : 500;
    format_head(out_, response_, status, static_cast<size_t>(info.st_size), /*chunked=*/false, close,
                /*announce_keep_alive=*/http10_);
    lowest().expires_after(shared_->options.idle_timeout);
    asio::async_write(stream_, asio::buffer(out_), [self = self(), close](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) {
        self->hard_close();
        return;
      }
      self->write_file_piece(close);
    });
  }

  void write_file_piece(bool close) {
    if (body_left_ == 0) {
      close_body_file();
      if (close) {
        linger();
      } else {
        do_read();
      }
      return;
    }
    if (piece_.empty()) piece_.resize(size_t{1} << 20);
    ssize_t n = ::read(body_fd_, piece_.data(), std::min(piece_.size(), body_left_));
    if (n <= 0) {
      spdlog::error("response body file ended early file=\"{}\"", response_.body_file);
      hard_close();  // the length is promised: the client sees a short body, never a wrong one
      return;
    }
    body_left_ -= static_cast<size_t>(n);
    lowest().expires_after(shared_->options.idle_timeout);
    asio::async_write(stream_, asio::buffer(piece_.data(), static_cast<size_t>(n)),
                      [self = self(), close](error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) {
                          self->hard_close();
                          return;
                        }
                        self->write_file_piece(close);
                      });
  }

  void close_body_file() {
    if (body_fd_ >= 0) ::close(body_fd_);
    body_fd_ = -1;
    response_.body_file.clear();
  }

  void respond_error(int status, std::string_view code, const std::string& message) {
    response_ = error_response(status, code, message);
    head_ = false;
    write_response(/*close=*/true, /*linger=*/true);
  }

  void write_response(bool close, bool linger) {
    int status = response_.status >= 100 && response_.status <= 999 ? response_.status : 500;
    bool no_body = status < 200 || status == 204 || status == 304;
    format_head(out_, response_, status, no_body ? std::nullopt : std::optional<size_t>(response_.body.size()),
                /*chunked=*/false, close, /*announce_keep_alive=*/http10_);
    // One buffer: Boost 1.74's ssl_stream stalls writing a header and a body over 16 KiB given as
    // two buffers (only the first TLS record went out), so the head and the body are joined.
    if (!no_body && !head_) out_ += response_.body;
    lowest().expires_after(shared_->options.idle_timeout);
    asio::async_write(stream_, asio::buffer(out_), [self = self(), close, linger](error_code ec, size_t) {
      if (self->closed_) return;
      self->response_.body = std::string();
      if (ec) {
        self->hard_close();
      } else if (!close) {
        self->do_read();
      } else if (linger) {
        self->linger();
      } else {
        self->hard_close();
      }
    });
  }

  // Closes after the client has stopped sending (or a few seconds), so that unread input does not
  // turn the close into a reset that could destroy the response in flight.
  void linger() {
    if constexpr (!kTls) {
      error_code ec;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    }
    lingered_ = 0;
    lowest().expires_after(kLingerTimeout);
    drain();
  }

  void drain() {
    lowest().async_read_some(asio::buffer(scratch_), [self = self()](error_code ec, size_t n) {
      if (self->closed_) return;
      self->lingered_ += n;
      if (ec || self->lingered_ > kLingerBytes) {
        self->hard_close();
        return;
      }
      self->drain();
    });
  }

  void begin_stream() {
    auto stream = std::make_shared<StreamImpl>(executor_, weak_from_this(), shared_->options.max_stream_backlog_bytes);
    std::string head;
    format_head(head, response_, response_.status >= 100 && response_.status <= 999 ? response_.status : 500,
                std::nullopt, /*chunked=*/true, /*close=*/true);
    stream->start(std::move(head));
    stream_impl_ = stream;
    bool stopping = false;
    {
      std::lock_guard lock(shared_->mu);
      stopping = shared_->stopping;
      if (!stopping) shared_->streams[id_] = stream;
    }
    if (stopping) {
      hard_close();
      return;
    }
    lowest().expires_never();
    watch_for_disconnect();
    kick();
    if (!shared_->pool.post(Task{self(), true})) hard_close();
  }

  // While streaming, a read stays pending: it ends with an error when the client goes away.
  void watch_for_disconnect() {
    stream_.async_read_some(asio::buffer(scratch_), [self = self()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) {
        self->hard_close();
        return;
      }
      self->watch_for_disconnect();  // whatever the client sends meanwhile is ignored
    });
  }

  std::shared_ptr<Shared> shared_;
  AsyncStream stream_;
  asio::any_io_executor executor_;  // the connection's strand
  size_t body_limit_ = 0;           // of the request being read
  const uint64_t id_;
  const bool overflow_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::request_parser<http::file_body>> file_parser_;  // a spooled body, once its header is in
  std::string spool_path_;  // the spool file of the request being read or handled
  int spool_fd_ = -1;       // the spool file being written by read_raw_body
  struct HashDeleter {
    void operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }
  };
  std::unique_ptr<EVP_MD_CTX, HashDeleter> spool_hash_;  // of what read_raw_body has written
  uint64_t spool_left_ = 0;  // of the body it reads
  int body_fd_ = -1;        // the file a response's body is being sent from
  size_t body_left_ = 0;    // of it
  std::vector<char> piece_;  // the piece of it being written
  Request req_;
  Response response_;
  bool keep_alive_ = false;
  bool head_ = false;
  bool http10_ = false;
  bool closed_ = false;
  bool writing_ = false;
  bool coalescing_ = false;  // a kick waits for coalesce_timer_
  std::chrono::steady_clock::time_point last_write_{};
  std::optional<asio::steady_timer> coalesce_timer_;  // made on first use, on the strand
  std::string out_;       // the header of the response being written
  std::string inflight_;  // the stream bytes being written
  std::shared_ptr<StreamImpl> stream_impl_;
  size_t lingered_ = 0;
  std::array<char, 4096> scratch_{};
};

using TlsSession = Session<beast::ssl_stream<beast::tcp_stream>>;
using PlainSession = Session<beast::tcp_stream>;

struct ListenAddress {
  tcp::endpoint endpoint;
  std::string url_host;  // how url() names the host
};

Result<ListenAddress> parse_listen(const std::string& listen, asio::io_context& ioc) {
  auto bad = [&](const std::string& why) { return Error::invalid_argument("--listen", listen, why); };
  std::string host;
  std::string port_text;
  if (!listen.empty() && listen.front() == '[') {
    auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return bad("expected HOST:PORT, e.g. [::1]:8443");
    }
    host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) return bad("expected HOST:PORT, e.g. 0.0.0.0:8443 or 127.0.0.1:0");
    host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
  }
  unsigned port = 0;
  auto [end, err] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || err != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  if (host.empty()) host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port_text, ec);
    if (ec || results.empty()) return bad("cannot resolve \"" + host + "\": " + ec.message());
    address = results.begin()->endpoint().address();
  }
  ListenAddress result;
  result.endpoint = tcp::endpoint(address, static_cast<uint16_t>(port));
  // A wildcard address is reached locally through the loopback address.
  if (address.is_unspecified()) {
    result.url_host = address.is_v6() ? "[::1]" : "127.0.0.1";
  } else {
    result.url_host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  }
  return result;
}

bool is_loopback(const asio::ip::address& address) {
  if (address.is_loopback()) return true;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return false;
}

Status check_readable(const std::string& field, const std::string& path) {
  if (path.empty()) return Error::invalid_argument(field, path, "TLS needs a PEM file here");
  if (::access(path.c_str(), R_OK) != 0) {
    return Error::invalid_argument(field, path, std::string("cannot read the file: ") + std::strerror(errno));
  }
  return Status::ok();
}

Result<std::unique_ptr<ssl::context>> make_tls_context(const ServerOptions& options) {
  if (auto status = check_readable("cert_file", options.cert_file); !status) return status.error();
  if (auto status = check_readable("key_file", options.key_file); !status) return status.error();
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use |
                       ssl::context::no_compression);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  error_code ec;
  context->use_certificate_chain_file(options.cert_file, ec);
  if (ec) {
    return Error::invalid_argument("cert_file", options.cert_file, "not a PEM certificate chain: " + ec.message());
  }
  context->use_private_key_file(options.key_file, ssl::context::pem, ec);
  if (ec) return Error::invalid_argument("key_file", options.key_file, "not a PEM private key: " + ec.message());
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return Error::invalid_argument("key_file", options.key_file,
                                   "does not match the certificate in " + options.cert_file);
  }
  if (!options.client_ca_file.empty()) {
    if (auto status = check_readable("client_ca_file", options.client_ca_file); !status) return status.error();
    context->load_verify_file(options.client_ca_file, ec);
    if (ec) {
      return Error::invalid_argument("client_ca_file", options.client_ca_file,
                                     "not a PEM certificate: " + ec.message());
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

class ServerImpl final : public Server {
 public:
  ServerImpl(std::shared_ptr<Shared> shared, int io_threads)
      : shared_(std::move(shared)), ioc_(io_threads), acceptor_(asio::make_strand(ioc_)) {}

  ~ServerImpl() override { stop(); }

  Status listen(const ListenAddress& address) {
    error_code ec;
    acceptor_.open(address.endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(address.endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Error::of(ErrorCode::kUnavailable, "--listen", shared_->options.listen, "cannot listen: " + ec.message());
    }
    port_ = acceptor_.local_endpoint(ec).port();
    url_ = std::string(shared_->tls ? "https://" : "http://") + address.url_host + ":" + std::to_string(port_);
    return Status::ok();
  }

  void run(int io_threads, int worker_threads) {
    shared_->pool.start(worker_threads);
    asio::post(acceptor_.get_executor(), [this] { do_accept(); });
    for (int i = 0; i < io_threads; ++i) {
      io_threads_.emplace_back([this] {
        for (;;) {
          try {
            ioc_.run();
            return;
          } catch (const std::exception& e) {
            spdlog::error("net io thread caught error=\"{}\"", e.what());
          } catch (...) {
            spdlog::error("net io thread caught an unknown exception");
          }
        }
      });
    }
  }

  std::string url() const override { return url_; }
  uint16_t port() const override { return port_; }

  void stop() override {
    std::lock_guard stop_lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    std::vector<std::shared_ptr<SessionBase>> sessions;
    std::vector<std::shared_ptr<StreamImpl>> streams;
    {
      std::lock_guard lock(shared_->mu);
      shared_->stopping = true;
      shared_->stopping_flag = true;
      for (auto& [id, weak] : shared_->sessions) {
        if (auto session = weak.lock()) sessions.push_back(std::move(session));
      }
      for (auto& [id, weak] : shared_->streams) {
        if (auto stream = weak.lock()) streams.push_back(std::move(stream));
      }
    }
    asio::post(acceptor_.get_executor(), [this] {
      error_code ec;
      acceptor_.close(ec);
    });
    for (auto& stream : streams) stream->close_now();
    streams.clear();
    for (auto& session : sessions) session->abort();
    sessions.clear();
    shared_->pool.stop();
    work_.reset();
    {
      std::unique_lock lock(shared_->mu);
      shared_->sessions_gone.wait_for(lock, kStopGrace, [this] { return shared_->sessions.empty(); });
    }
    ioc_.stop();
    for (auto& thread : io_threads_) {
      if (thread.joinable()) thread.join();
    }
    io_threads_.clear();
  }

 private:
  void do_accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
      on_accept(ec, std::move(socket));
    });
  }

  void on_accept(error_code ec, tcp::socket socket) {
    if (shared_->stopping_flag.load() || ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors, most likely: wait a little rather than spin.
      spdlog::warn("accept failed error=\"{}\"", ec.message());
      retry_timer_ = std::make_unique<asio::steady_timer>(acceptor_.get_executor(), std::chrono::milliseconds(100));
      retry_timer_->async_wait([this](error_code wait_ec) {
        if (!wait_ec) do_accept();
      });
      return;
    }
    launch(std::move(socket));
    do_accept();
  }

  void launch(tcp::socket socket) {
    error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    bool overflow = shared_->connections.load() >= shared_->options.max_connections;
    if (overflow && shared_->overflow.load() >= kMaxOverflowSessions) return;  // closed here
    uint64_t id = ++shared_->next_id;
    auto& count = overflow ? shared_->overflow : shared_->connections;
    ++count;
    std::shared_ptr<SessionBase> session;
    try {
      if (shared_->tls) {
        session = std::make_shared<TlsSession>(shared_, std::move(socket), id, overflow);
      } else {
        session = std::make_shared<PlainSession>(shared_, std::move(socket), id, overflow);
      }
    } catch (const std::exception& e) {
      --count;  // no session, so no destructor to give the count back
      spdlog::error("cannot start a connection error=\"{}\"", e.what());
      return;
    }
    {
      std::lock_guard lock(shared_->mu);
      if (shared_->stopping) return;  // the session closes as it goes, outside the lock
      shared_->sessions.emplace(id, session);
    }
    asio::post(session->executor(), [session] { session->start(); });
  }


  std::shared_ptr<Shared> shared_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{ioc_.get_executor()};
  tcp::acceptor acceptor_;
  std::unique_ptr<asio::steady_timer> retry_timer_;
  std::vector<std::thread> io_threads_;
  std::string url_;
  uint16_t port_ = 0;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::start(const ServerOptions& options, Handler handler) {
  if (!handler) return Error::invalid_argument("handler", "", "a server needs a request handler");
  if (options.io_threads < 1 || options.worker_threads < 1) {
    return Error::invalid_argument("threads", std::to_string(std::min(options.io_threads, options.worker_threads)),
                                   "io_threads and worker_threads must be at least 1");
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->handler = std::move(handler);
  auto server = std::make_unique<ServerImpl>(shared, options.io_threads);
  asio::io_context resolver_context;
  auto address = parse_listen(options.listen, resolver_context);
  if (!address) return address.error();
  if (!options.tls && !is_loopback(address->endpoint.address())) {
    return Error::invalid_argument("--listen", options.listen,
                                   "plain HTTP is allowed only on a loopback address (127.0.0.1, ::1, localhost); "
                                   "serve TLS with a certificate and key to listen on " +
                                       address->endpoint.address().to_string());
  }
  if (options.tls) {
    auto context = make_tls_context(options);
    if (!context) return context.error();
    shared->tls = std::move(*context);
  }
  if (auto status = server->listen(*address); !status) return status.error();
  server->run(options.io_threads, options.worker_threads);
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace cnlab::net
