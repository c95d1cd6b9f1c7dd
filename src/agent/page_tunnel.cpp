#include "agent/page_tunnel.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cstdio>
#include <thread>

#include "net/tls_files.h"

namespace cnlab::agent {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using TlsStream = ssl::stream<tcp::socket>;

constexpr size_t kTokenBytes = 32;  // 64 hex characters, then '\n'

std::string hex(const unsigned char* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 15]);
  }
  return out;
}

std::string fingerprint_of(X509* cert) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!cert || X509_digest(cert, EVP_sha256(), digest, &size) != 1) return "";
  return hex(digest, size);
}

void restrict_to_tls12_and_later(ssl::context& context) {
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression);
}

tcp::socket& raw(tcp::socket& socket) { return socket; }
tcp::socket& raw(TlsStream& stream) { return stream.next_layer(); }

// Copies bytes both ways between two connected streams until either ends, then closes both.
// Both directions run on one io_context thread, which is what an SSL stream needs.
template <class A, class B>
class Relay : public std::enable_shared_from_this<Relay<A, B>> {
 public:
  Relay(std::unique_ptr<A> a, std::unique_ptr<B> b) : a_(std::move(a)), b_(std::move(b)) {}
  void start() {
    pump(*a_, *b_, a_to_b_);
    pump(*b_, *a_, b_to_a_);
  }

 private:
  template <class From, class To>
  void pump(From& from, To& to, std::array<char, 1 << 16>& buffer) {
    auto self = this->shared_from_this();
    from.async_read_some(asio::buffer(buffer), [this, self, &from, &to, &buffer](error_code ec, size_t n) {
      if (ec) return close();
      asio::async_write(to, asio::buffer(buffer.data(), n), [this, self, &from, &to, &buffer](error_code ec, size_t) {
        if (ec) return close();
        pump(from, to, buffer);
      });
    });
  }
  void close() {
    error_code ignored;
    raw(*a_).close(ignored);
    raw(*b_).close(ignored);
  }

  std::unique_ptr<A> a_;
  std::unique_ptr<B> b_;
  std::array<char, 1 << 16> a_to_b_{}, b_to_a_{};
};

template <class A, class B>
void relay(std::unique_ptr<A> a, std::unique_ptr<B> b) {
  std::make_shared<Relay<A, B>>(std::move(a), std::move(b))->start();
}

// An io_context on a thread of its own. Its owner stops it before destroying what its handlers
// use (acceptors, contexts), and destroys it after them.
class Loop {
 public:
  void run() {
    thread_ = std::thread([this] { io_.run(); });
  }
  void stop() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  ~Loop() { stop(); }
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);

 private:
  std::thread thread_;
};

Result<tcp::endpoint> endpoint_of(const std::string& host, int port) {
  asio::io_context io;
  tcp::resolver resolver(io);
  error_code ec;
  auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) return Error::invalid_argument("address", host, "cannot be resolved: " + ec.message());
  return found.begin()->endpoint();
}

class Gate final : public PageGate {
 public:
  Gate(int backend_port, std::string fingerprint, std::string token)
      : backend_port_(backend_port), fingerprint_(std::move(fingerprint)), token_(std::move(token)) {}
  ~Gate() override { loop_->stop(); }  // no handler runs while the members it uses go

  Status listen(const tcp::endpoint& where, const std::string& cert, const std::string& key) {
    restrict_to_tls12_and_later(tls_);
    error_code ec;
    tls_.use_certificate_chain_file(cert, ec);
    if (!ec) tls_.use_private_key_file(key, ssl::context::pem, ec);
    if (ec) return Error::internal("page gate certificate: " + ec.message());
    acceptor_.open(where.protocol(), ec);
    if (!ec) acceptor_.bind(where, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Error::failed_precondition("page gate cannot listen on " + where.address().to_string() + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    loop_->run();
    return {};
  }
  int port() const override { return port_; }
  const std::string& fingerprint() const override { return fingerprint_; }
  const std::string& token() const override { return token_; }

 private:
  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec) return;  // stopped
      auto peer = std::make_unique<TlsStream>(std::move(socket), tls_);
      TlsStream& stream = *peer;
      stream.async_handshake(ssl::stream_base::server, [this, peer = std::move(peer)](error_code ec) mutable {
        if (ec) return spdlog::warn("page gate refused a connection: TLS handshake: {}", ec.message());
        check_token(std::move(peer));
      });
      accept();
    });
  }
  void check_token(std::unique_ptr<TlsStream> peer) {
    auto presented = std::make_shared<std::string>(2 * kTokenBytes + 1, '\0');
    TlsStream& stream = *peer;
    asio::async_read(stream, asio::buffer(*presented), [this, presented, peer = std::move(peer)](error_code ec, size_t) mutable {
      if (ec || presented->back() != '\n' ||
          CRYPTO_memcmp(presented->data(), token_.data(), token_.size()) != 0) {
        spdlog::warn("page gate refused a connection: it did not present the migration's token");
        return;
      }
      auto backend = std::make_unique<tcp::socket>(loop_->io_);
      tcp::socket& socket = *backend;
      socket.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(backend_port_)),
                           [peer = std::move(peer), backend = std::move(backend)](error_code ec) mutable {
                             if (ec) return spdlog::warn("page gate: CRIU's page server: {}", ec.message());
                             relay(std::move(peer), std::move(backend));
                           });
    });
  }

  int backend_port_;
  std::string fingerprint_, token_;
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  ssl::context tls_{ssl::context::tls_server};
  tcp::acceptor acceptor_{loop_->io_};
  int port_ = 0;
};

class Tunnel final : public PageTunnel {
 public:
  Tunnel(tcp::endpoint gate, std::string fingerprint, std::string token)
      : gate_(gate), fingerprint_(std::move(fingerprint)), token_(std::move(token) + "\n") {}
  ~Tunnel() override { loop_->stop(); }

  Status listen() {
    restrict_to_tls12_and_later(tls_);
    // The gate's certificate is made for one migration and signed by nobody: what vouches for it
    // is its fingerprint, which the source gave the server and the server gave us.
    tls_.set_verify_mode(ssl::verify_peer);
    tls_.set_verify_callback([fingerprint = fingerprint_](bool, ssl::verify_context& context) {
      X509_STORE_CTX* store = context.native_handle();
      if (X509_STORE_CTX_get_error_depth(store) != 0) return true;  // the leaf decides
      return fingerprint_of(X509_STORE_CTX_get_current_cert(store)) == fingerprint;
    });
    error_code ec;
    const tcp::endpoint local(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(local.protocol(), ec);
    if (!ec) acceptor_.bind(local, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Error::failed_precondition("page tunnel cannot listen on loopback: " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    loop_->run();
    return {};
  }
  int port() const override { return port_; }

 private:
  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec) return;
      auto local = std::make_unique<tcp::socket>(std::move(socket));
      auto remote = std::make_unique<TlsStream>(loop_->io_, tls_);
      TlsStream& stream = *remote;
      stream.next_layer().async_connect(gate_, [this, local = std::move(local), remote = std::move(remote)](error_code ec) mutable {
        if (ec) return spdlog::warn("page tunnel: the source's gate: {}", ec.message());
        TlsStream& stream = *remote;
        stream.async_handshake(ssl::stream_base::client, [this, local = std::move(local), remote = std::move(remote)](error_code ec) mutable {
          if (ec) return spdlog::warn("page tunnel: the source's gate is not the one the server named: {}", ec.message());
          TlsStream& stream = *remote;
          asio::async_write(stream, asio::buffer(token_), [local = std::move(local), remote = std::move(remote)](error_code ec, size_t) mutable {
            if (ec) return spdlog::warn("page tunnel: {}", ec.message());
            relay(std::move(local), std::move(remote));
          });
        });
      });
      accept();
    });
  }

  tcp::endpoint gate_;
  std::string fingerprint_, token_;
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  ssl::context tls_{ssl::context::tls_client};
  tcp::acceptor acceptor_{loop_->io_};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<PageGate>> PageGate::open(const std::string& address, int backend_port,
                                                 const std::filesystem::path& dir) {
  const std::string cert = (dir / "page-gate.pem").string(), key = (dir / "page-gate.key").string();
  if (auto made = net::create_ca(cert, key, "cnlab post-copy page gate", 2); !made) return made.error();
  std::FILE* file = std::fopen(cert.c_str(), "r");
  X509* x509 = file ? PEM_read_X509(file, nullptr, nullptr, nullptr) : nullptr;
  if (file) std::fclose(file);
  const std::string fingerprint = fingerprint_of(x509);
  X509_free(x509);
  if (fingerprint.empty()) return Error::internal("page gate: cannot read back its certificate " + cert);
  unsigned char random[kTokenBytes];
  if (RAND_bytes(random, sizeof random) != 1) return Error::internal("page gate: no random bytes for its token");
  auto where = endpoint_of(address, 0);
  if (!where) {
    std::error_code ec;
    std::filesystem::remove(key, ec);
    std::filesystem::remove(cert, ec);
    return where.error();
  }
  auto gate = std::make_unique<Gate>(backend_port, fingerprint, hex(random, sizeof random));
  Status listening = gate->listen(*where, cert, key);
  // Loaded into its TLS context: the files, the key above all, are of no more use.
  std::error_code ec;
  std::filesystem::remove(key, ec);
  std::filesystem::remove(cert, ec);
  if (!listening) return listening.error();
  return std::unique_ptr<PageGate>(std::move(gate));
}

Result<std::unique_ptr<PageTunnel>> PageTunnel::open(const HostPort& gate, const std::string& fingerprint,
                                                     const std::string& token) {
  if (fingerprint.size() != 64 || token.size() != 2 * kTokenBytes) {
    return Error::invalid_argument("pages", gate.host, "a post-copy page stream needs the gate's fingerprint and token");
  }
  auto where = endpoint_of(gate.host, gate.port);
  if (!where) return where.error();
  auto tunnel = std::make_unique<Tunnel>(*where, fingerprint, token);
  if (auto listening = tunnel->listen(); !listening) return listening.error();
  return std::unique_ptr<PageTunnel>(std::move(tunnel));
}

}  // namespace cnlab::agent
