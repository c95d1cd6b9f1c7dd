#include "agent/page_tunnel.h"

#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <thread>

#include "net/tls_files.h"

namespace cnlab::agent {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using TlsStream = ssl::stream<tcp::socket>;

// TLS 1.2 or later with this node's certificate, trusting the cluster's CA only, and requiring
// the peer's certificate to be node `peer`'s (its DNS name checked as part of verification).
Status use_node_certificate(ssl::context& context, const NodeTls& tls, const std::string& peer) {
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression);
  error_code ec;
  context.use_certificate_chain_file(tls.cert_file, ec);
  if (!ec) context.use_private_key_file(tls.key_file, ssl::context::pem, ec);
  if (!ec) context.load_verify_file(tls.ca_file, ec);
  if (ec) return Error::failed_precondition("node certificate " + tls.cert_file + ": " + ec.message());
  context.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  const std::string name = net::node_dns_name(peer);
  if (X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(context.native_handle()), name.c_str(), name.size()) != 1) {
    return Error::internal("page stream: cannot require the peer name " + name);
  }
  return {};
}

// Opens, binds and listens on `where`; the port bound, or an error naming `who`.
Result<int> listen_on(tcp::acceptor& acceptor, const tcp::endpoint& where, const std::string& who) {
  error_code ec;
  acceptor.open(where.protocol(), ec);
  if (!ec) acceptor.bind(where, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error::failed_precondition(who + " cannot listen on " + where.address().to_string() + ": " + ec.message());
  return acceptor.local_endpoint().port();
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
  explicit Gate(int backend_port) : backend_port_(backend_port) {}
  ~Gate() override { loop_->stop(); }  // no handler runs while the members it uses go

  Status listen(const tcp::endpoint& where, const NodeTls& tls, const std::string& target) {
    if (auto configured = use_node_certificate(tls_, tls, target); !configured) return configured;
    auto port = listen_on(acceptor_, where, "page gate");
    if (!port) return port.error();
    port_ = *port;
    accept();
    loop_->run();
    return {};
  }
  int port() const override { return port_; }

 private:
  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec) return;  // stopped
      auto peer = std::make_unique<TlsStream>(std::move(socket), tls_);
      TlsStream& stream = *peer;
      stream.async_handshake(ssl::stream_base::server, [this, peer = std::move(peer)](error_code ec) mutable {
        if (ec) return spdlog::warn("page gate refused a connection (not the migration's target): {}", ec.message());
        auto backend = std::make_unique<tcp::socket>(loop_->io_);
        tcp::socket& socket = *backend;
        socket.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(backend_port_)),
                             [peer = std::move(peer), backend = std::move(backend)](error_code ec) mutable {
                               if (ec) return spdlog::warn("page gate: CRIU's page server: {}", ec.message());
                               relay(std::move(peer), std::move(backend));
                             });
      });
      accept();
    });
  }

  int backend_port_;
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  ssl::context tls_{ssl::context::tls_server};
  tcp::acceptor acceptor_{loop_->io_};
  int port_ = 0;
};

class Tunnel final : public PageTunnel {
 public:
  explicit Tunnel(tcp::endpoint gate) : gate_(gate) {}
  ~Tunnel() override { loop_->stop(); }

  Status listen(const NodeTls& tls, const std::string& source) {
    if (auto configured = use_node_certificate(tls_, tls, source); !configured) return configured;
    auto port = listen_on(acceptor_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), "page tunnel");
    if (!port) return port.error();
    port_ = *port;
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
      stream.next_layer().async_connect(gate_, [local = std::move(local), remote = std::move(remote)](error_code ec) mutable {
        if (ec) return spdlog::warn("page tunnel: the source's gate: {}", ec.message());
        TlsStream& stream = *remote;
        stream.async_handshake(ssl::stream_base::client, [local = std::move(local), remote = std::move(remote)](error_code ec) mutable {
          if (ec) return spdlog::warn("page tunnel: the gate is not the source node's: {}", ec.message());
          relay(std::move(local), std::move(remote));
        });
      });
      accept();
    });
  }

  tcp::endpoint gate_;
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  ssl::context tls_{ssl::context::tls_client};
  tcp::acceptor acceptor_{loop_->io_};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<PageGate>> PageGate::open(const std::string& address, int backend_port, const NodeTls& tls,
                                                 const std::string& target) {
  auto where = endpoint_of(address, 0);
  if (!where) return where.error();
  auto gate = std::make_unique<Gate>(backend_port);
  if (auto listening = gate->listen(*where, tls, target); !listening) return listening.error();
  return std::unique_ptr<PageGate>(std::move(gate));
}

Result<std::unique_ptr<PageTunnel>> PageTunnel::open(const HostPort& gate, const NodeTls& tls, const std::string& source) {
  auto where = endpoint_of(gate.host, gate.port);
  if (!where) return where.error();
  auto tunnel = std::make_unique<Tunnel>(*where);
  if (auto listening = tunnel->listen(tls, source); !listening) return listening.error();
  return std::unique_ptr<PageTunnel>(std::move(tunnel));
}

}  // namespace cnlab::agent
