// The blocking client: one keep-alive connection, plain or TLS, driven by a private io_context so
// that every operation has a timeout (beast::tcp_stream's expiry applies to asynchronous operations
// only; each call starts one and runs the context until it completes).
#include <atomic>
#include <limits>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <vector>

#include "net/net.h"

namespace cnlab::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Why a TLS file of the options could not be loaded: that it cannot be read, and why (no such file,
// permission denied), or else that it is not `what`, with OpenSSL's reason.
std::string file_problem(const std::string& path, const std::string& what, const error_code& ec) {
  if (::access(path.c_str(), R_OK) != 0) return std::string("cannot read the file: ") + std::strerror(errno);
  return "not " + what + ": " + ec.message();
}

struct Url {
  bool tls = true;
  std::string host;    // without brackets
  std::string port;
  std::string authority;  // for the Host header
  std::string prefix;     // a path the targets are appended to ("" or "/api", no trailing '/')
};

Result<Url> parse_url(const std::string& text) {
  auto bad = [&](const std::string& why) { return Error::invalid_argument("url", text, why); };
  Url url;
  std::string_view rest = text;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    url.tls = false;
    rest.remove_prefix(7);
  } else {
    return bad("expected https://HOST:PORT (or http://127.0.0.1:PORT)");
  }
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    url.prefix = path;
  }
  std::string_view port;
  if (authority.starts_with("[")) {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address needs a closing ']'");
    url.host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected ':' and a port after the address");
      port = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty()) return bad("the URL names no host");
  if (port.empty()) {
    url.port = url.tls ? "443" : "80";
  } else {
    unsigned value = 0;
    auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (err != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return bad("the port must be a number from 1 to 65535");
    }
    url.port = port;
  }
  url.authority = authority;
  return url;
}

class ClientImpl final : public Client {
 public:
  ClientImpl(ClientOptions options, Url url) : options_(std::move(options)), url_(std::move(url)) {}

  ~ClientImpl() override { close(); }

  Status init() {
    if (!url_.tls) return Status::ok();
    tls_context_.emplace(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(tls_context_->native_handle(), TLS1_2_VERSION);
    tls_context_->set_verify_mode(ssl::verify_peer);
    error_code ec;
    if (options_.ca_file.empty()) {
      tls_context_->set_default_verify_paths(ec);
    } else {
      tls_context_->load_verify_file(options_.ca_file, ec);
      if (ec) {
        return Error::invalid_argument("ca_file", options_.ca_file, file_problem(options_.ca_file, "a PEM certificate", ec));
      }
    }
    if (!options_.cert_file.empty()) {
      tls_context_->use_certificate_chain_file(options_.cert_file, ec);
      if (ec) {
        return Error::invalid_argument("cert_file", options_.cert_file,
                                       file_problem(options_.cert_file, "a PEM certificate", ec));
      }
      tls_context_->use_private_key_file(options_.key_file, ssl::context::pem, ec);
      if (ec) {
        return Error::invalid_argument("key_file", options_.key_file,
                                       file_problem(options_.key_file, "a PEM private key", ec));
      }
    }
    return Status::ok();
  }

  Status open() {
    close();
    error_code ec;
    tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(url_.host, url_.port, ec);
    if (ec) return unavailable("cannot resolve " + url_.host + ": " + ec.message());
    if (url_.tls) {
      tls_.emplace(ioc_, *tls_context_);
      SSL* ssl = tls_->native_handle();
      error_code address_ec;
      asio::ip::make_address(url_.host, address_ec);
      if (!options_.server_name.empty()) {
        SSL_set1_host(ssl, options_.server_name.c_str());
      } else if (address_ec) {
        // A name: sent as SNI and checked against the certificate's DNS names.
        SSL_set_tlsext_host_name(ssl, url_.host.c_str());
        SSL_set1_host(ssl, url_.host.c_str());
      } else {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), url_.host.c_str());
      }
    } else {
      plain_.emplace(ioc_);
    }
    auto& socket = lowest();
    socket.expires_after(options_.timeout);
    ec = asio::error::would_block;
    socket.async_connect(endpoints, [&](error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (ec) {
      close();
      return unavailable("cannot connect to " + url_.authority + ": " + ec.message());
    }
    socket.socket().set_option(tcp::no_delay(true), ec);
    if (url_.tls) {
      socket.expires_after(options_.timeout);
      ec = asio::error::would_block;
      tls_->async_handshake(ssl::stream_base::client, [&](error_code e) { ec = e; });
      run();
      if (ec) {
        long verify = SSL_get_verify_result(tls_->native_handle());
        close();
        if (verify != X509_V_OK) {
          return unavailable("TLS certificate verification of " + url_.authority + " failed: " +
                             X509_verify_cert_error_string(verify) + " (the server's certificate must chain to " +
                             (options_.ca_file.empty() ? std::string("a system CA") : options_.ca_file) +
                             " and name " + (options_.server_name.empty() ? url_.host : options_.server_name) + ")");
        }
        return unavailable("TLS handshake with " + url_.authority + " failed: " + ec.message());
      }
    }
    connected_ = true;
    completed_ = 0;
    return Status::ok();
  }

  void close() {
    if (!tls_ && !plain_) return;
    error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
    tls_.reset();
    plain_.reset();
    buffer_.clear();
    connected_ = false;
  }

  Result<ClientResponse> request(const std::string& method, const std::string& target, const std::string& body,
                                 const std::map<std::string, std::string>& headers) override {
    if (interrupted_) return unavailable("the client was interrupted");
    auto message = make_request(method, target, body, headers);
    for (int attempt = 0;; ++attempt) {
      bool retry = false;
      auto sent = send(message, attempt, retry);
      if (retry) continue;
      if (!sent) return sent.error();
      auto response = read_response(method, target, attempt, retry);
      if (retry) continue;
      return response;
    }
  }

  Result<ClientResponse> upload(const std::string& method, const std::string& target, const std::string& body_path,
                                const std::map<std::string, std::string>& headers) override {
    if (interrupted_) return unavailable("the client was interrupted");
    for (int attempt = 0;; ++attempt) {
      bool retry = false;
      auto sent = send_file(method, target, body_path, headers, attempt, retry);
      if (retry) continue;
      if (!sent && (sent.error().code != ErrorCode::kUnavailable || !connected_)) return sent.error();
      // Cut off mid-body: a server may answer (and close) before it has read the whole body, and
      // its answer says why.
      auto response = read_response(method, target, attempt, retry);
      if (!sent && !response) return sent.error();
      if (retry) continue;
      return response;
    }
  }

  Result<ClientResponse> download(const std::string& target, const std::string& to_path) override {
    ClientResponse result;
    int fd = -1;
    std::optional<Error> failure;
    auto received = receive(
        "GET", target,
        [&](const http::response<http::buffer_body>& head) -> Status {
          result = status_and_headers(head);
          if (result.status / 100 != 2) return Status::ok();  // an error's body stays in memory
          fd = ::open(to_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
          if (fd < 0) return Error::invalid_argument("to_path", to_path, std::string("cannot write it: ") + std::strerror(errno));
          return Status::ok();
        },
        [&](std::string_view chunk) {
          if (fd < 0) {
            result.body.append(chunk);
            return true;
          }
          for (size_t written = 0; written < chunk.size();) {
            ssize_t n = ::write(fd, chunk.data() + written, chunk.size() - written);
            if (n <= 0) {
              failure = Error::internal("cannot write " + to_path + ": " + std::strerror(errno));
              return false;
            }
            written += static_cast<size_t>(n);
          }
          return true;
        });
    if (fd >= 0 && ::close(std::exchange(fd, -1)) != 0 && !failure) {
      failure = Error::internal("cannot write " + to_path + ": " + std::strerror(errno));
    }
    if (!received) failure = received.error();
    if (failure) {
      ::unlink(to_path.c_str());
      return *failure;
    }
    return result;
  }

  void interrupt() override {
    interrupted_.store(true);
    // Runs on the thread inside ioc_.run() (or at the start of the next run): cancels what waits.
    asio::post(ioc_, [this] {
      if (tls_ || plain_) lowest().cancel();
    });
  }

  Result<int> stream(const std::string& method, const std::string& target,
                     const std::function<bool(std::string_view)>& on_chunk) override {
    return receive(method, target, nullptr, on_chunk);
  }

 private:
  Error unavailable(std::string message) const {
    return Error::of(ErrorCode::kUnavailable, "", "", options_.url + ": " + message);
  }

  beast::tcp_stream& lowest() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

  // Runs the operation just started to completion. An interrupt() that came before it (between two
  // operations, or while connecting, when its posted cancel found nothing to cancel) cancels it
  // here; one that comes while it waits is the posted cancel, run inside ioc_.run().
  void run() {
    if (interrupted_ && (tls_ || plain_)) lowest().cancel();
    ioc_.restart();
    ioc_.run();
  }

  // Starts `start(stream, handler)` on the open connection with the timeout, runs it to completion,
  // and returns its error.
  template <typename Start>
  error_code in_stream(Start&& start) {
    error_code ec = asio::error::would_block;
    auto done = [&ec](error_code e, size_t) { ec = e; };
    lowest().expires_after(options_.timeout);
    if (tls_) {
      start(*tls_, done);
    } else {
      start(*plain_, done);
    }
    run();
    return ec;
  }

  // Sends a bodiless request and reads its response as it arrives: `on_head` (when given) sees the
  // status and headers first (an error from it ends the exchange), then `on_chunk` each piece of
  // the body until the end or until it returns false. The response's status, or kUnavailable.
  Result<int> receive(const std::string& method, const std::string& target,
                      const std::function<Status(const http::response<http::buffer_body>&)>& on_head,
                      const std::function<bool(std::string_view)>& on_chunk) {
    if (interrupted_) return unavailable("the client was interrupted");
    auto message = make_request(method, target, "", {});
    for (int attempt = 0;; ++attempt) {
      bool retry = false;
      auto sent = send(message, attempt, retry);
      if (retry) continue;
      if (!sent) return sent.error();
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none misbehaves in 1.74 (compared as a number)
      error_code ec =
          in_stream([&](auto& stream, auto done) { http::async_read_header(stream, buffer_, parser, done); });
      if (ec) {
        bool nothing_back = !parser.got_some();
        close();
        if (nothing_back && reused_ && attempt == 0) continue;
        return unavailable(method + " " + target + ": reading the response failed: " + ec.message());
      }
      int status = static_cast<int>(parser.get().result_int());
      if (on_head) {
        if (auto taken = on_head(parser.get()); !taken) {
          close();
          return taken.error();
        }
      }
      if (auto length = parser.content_length(); length && !parser.chunked() && method != "HEAD") {
        return receive_length(method, target, status, *length, parser.get().keep_alive(), on_chunk);
      }
      while (!parser.is_done()) {
        parser.get().body().data = chunk_.data();
        parser.get().body().size = chunk_.size();
        ec = in_stream([&](auto& stream, auto done) { http::async_read_some(stream, buffer_, parser, done); });
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          close();
          return unavailable(method + " " + target + ": the stream broke off: " + ec.message());
        }
        if (interrupted_) {
          close();
          return unavailable("the client was interrupted");
        }
        size_t received = chunk_.size() - parser.get().body().size;
        if (received > 0 && !on_chunk(std::string_view(chunk_.data(), received))) {
          close();
          return status;
        }
      }
      ++completed_;
      if (!parser.get().keep_alive()) close();
      return status;
    }
  }

  // The rest of a response whose head declared `length` bytes of body: what came with the head,
  // then reads of a MiB straight from the connection (a download of GiBs at the connection's pace,
  // not at Beast's 64 KiB per read).
  Result<int> receive_length(const std::string& method, const std::string& target, int status, uint64_t length,
                             bool keep_alive, const std::function<bool(std::string_view)>& on_chunk) {
    const size_t with_head = static_cast<size_t>(std::min<uint64_t>(buffer_.size(), length));
    if (with_head > 0) {
      const bool more = on_chunk(std::string_view(static_cast<const char*>(buffer_.data().data()), with_head));
      buffer_.consume(with_head);
      length -= with_head;
      if (!more) {
        close();
        return status;
      }
    }
    if (length > 0 && piece_.empty()) piece_.resize(size_t{1} << 20);
    while (length > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(piece_.size(), length));
      error_code ec = in_stream(
          [&](auto& stream, auto done) { asio::async_read(stream, asio::buffer(piece_.data(), want), done); });
      if (ec) {
        close();
        return unavailable(method + " " + target + ": the body broke off: " + ec.message());
      }
      if (interrupted_) {
        close();
        return unavailable("the client was interrupted");
      }
      length -= want;
      if (!on_chunk(std::string_view(piece_.data(), want))) {
        close();
        return status;
      }
    }
    ++completed_;
    if (!keep_alive) close();
    return status;
  }

  // A response's status, and its headers with names lower-cased (repeated ones joined by ", ").
  template <typename Response>
  static ClientResponse status_and_headers(const Response& response) {
    ClientResponse result;
    result.status = static_cast<int>(response.result_int());
    for (const auto& field : response) {
      std::string name(field.name_string().data(), field.name_string().size());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto value = field.value();
      auto [it, inserted] = result.headers.try_emplace(std::move(name), value.data(), value.size());
      if (!inserted) it->second.append(", ").append(value.data(), value.size());
    }
    return result;
  }

  // The request line and the headers every request carries, then `headers` (a JSON body's
  // Content-Type first, for them to override).
  template <typename Request>
  void set_head(Request& message, const std::string& method, const std::string& target, bool json_body,
                const std::map<std::string, std::string>& headers) const {
    message.version(11);
    message.method_string(method);
    message.target(url_.prefix + target);
    message.set(http::field::host, url_.authority);
    message.set(http::field::user_agent, "cnlab");
    if (!options_.token.empty()) message.set(http::field::authorization, "Bearer " + options_.token);
    if (json_body) message.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) message.set(name, value);
  }

  http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                                const std::string& body,
                                                const std::map<std::string, std::string>& headers) const {
    http::request<http::string_body> message;
    set_head(message, method, target, !body.empty(), headers);
    message.body() = body;
    message.keep_alive(true);
    message.prepare_payload();
    return message;
  }

  // Reads the response to the request just sent. On a kept-alive connection that the server had
  // closed before the request (nothing came back), sets `retry` on the first attempt.
  Result<ClientResponse> read_response(const std::string& method, const std::string& target, int attempt,
                                       bool& retry) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none misbehaves in 1.74 (compared as a number)
    error_code ec = in_stream([&](auto& stream, auto done) { http::async_read(stream, buffer_, parser, done); });
    if (ec) {
      bool nothing_back = !parser.got_some();
      close();
      if (nothing_back && reused_ && attempt == 0) {
        retry = true;
        return unavailable("retrying");
      }
      return unavailable(method + " " + target + ": reading the response failed: " + ec.message());
    }
    auto& response = parser.get();
    ClientResponse result = status_and_headers(response);
    result.body = std::move(response.body());
    ++completed_;
    if (!response.keep_alive()) close();
    return result;
  }

  // Writes a request whose body is the file at `path`: the head, then the file a chunk at a time
  // (one buffer per write; see the server on Boost 1.74's TLS stream and several buffers).
  Status send_file(const std::string& method, const std::string& target, const std::string& path,
                   const std::map<std::string, std::string>& headers, int attempt, bool& retry) {
    struct Fd {
      int fd;
      ~Fd() {
        if (fd >= 0) ::close(fd);
      }
    } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    struct stat info {};
    if (file.fd < 0 || ::fstat(file.fd, &info) != 0) {
      return Error::invalid_argument("body_path", path, std::string("cannot read it: ") + std::strerror(errno));
    }
    http::request<http::empty_body> head;
    set_head(head, method, target, /*json_body=*/false, headers);
    head.content_length(static_cast<uint64_t>(info.st_size));
    head.keep_alive(true);
    reused_ = connected_ && completed_ > 0;
    if (!connected_) {
      if (auto status = open(); !status) return status;
    }
    http::request_serializer<http::empty_body> serializer(head);
    error_code ec = in_stream([&](auto& stream, auto done) { http::async_write_header(stream, serializer, done); });
    if (ec) {
      close();
      if (reused_ && attempt == 0) {
        retry = true;
        return Status::ok();
      }
      return unavailable(method + " " + target + ": sending the request failed: " + ec.message());
    }
    std::vector<char> chunk(size_t{1} << 20);
    for (off_t left = info.st_size; left > 0;) {
      ssize_t n = ::read(file.fd, chunk.data(), static_cast<size_t>(std::min<off_t>(left, chunk.size())));
      if (n <= 0) {
        close();
        return Error::internal("cannot read " + path + ": " + (n < 0 ? std::strerror(errno) : "it got shorter"));
      }
      ec = in_stream([&](auto& stream, auto done) { asio::async_write(stream, asio::buffer(chunk.data(), n), done); });
      if (ec) return unavailable(method + " " + target + ": sending the body failed: " + ec.message());
      left -= n;
    }
    return Status::ok();
  }

  // Opens a connection when none is open and writes `message`. On a kept-alive connection that the
  // server has closed meanwhile, sets `retry` (once) instead of failing.
  Status send(http::request<http::string_body>& message, int attempt, bool& retry) {
    reused_ = connected_ && completed_ > 0;
    if (!connected_) {
      if (auto status = open(); !status) return status;
    }
    error_code ec = in_stream([&](auto& stream, auto done) { http::async_write(stream, message, done); });
    if (ec) {
      close();
      if (reused_ && attempt == 0) {
        retry = true;
        return Status::ok();
      }
      return unavailable(std::string(message.method_string()) + " " + std::string(message.target()) +
                         ": sending the request failed: " + ec.message());
    }
    return Status::ok();
  }

  ClientOptions options_;
  Url url_;
  asio::io_context ioc_{1};
  std::optional<ssl::context> tls_context_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
  std::optional<beast::tcp_stream> plain_;
  beast::flat_buffer buffer_;
  std::array<char, 16 << 10> chunk_{};
  std::vector<char> piece_;  // a MiB, for bodies of known length (receive_length)
  bool connected_ = false;
  bool reused_ = false;
  int completed_ = 0;  // responses read on this connection
  std::atomic<bool> interrupted_{false};
};

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  auto url = parse_url(options.url);
  if (!url) return url.error();
  if (options.timeout.count() <= 0) {
    return Error::invalid_argument("timeout", std::to_string(options.timeout.count()) + "ms", "must be positive");
  }
  auto client = std::make_unique<ClientImpl>(options, *url);
  if (auto status = client->init(); !status) return status.error();
  if (auto status = client->open(); !status) return status.error();
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace cnlab::net
