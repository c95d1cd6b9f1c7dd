// The post-copy page stream's gate and tunnel on loopback, over mutual TLS with node
// certificates: bytes go through both ways to the backend (an echo server standing in for CRIU's
// page server), and a tunnel of another node, a gate that is not the source, or a certificate from
// another cluster's CA never gets a byte through.
#include "agent/page_tunnel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

#include "test_cluster_ca.h"

namespace cnlab::agent {
namespace {

// A TCP echo server on 127.0.0.1 that counts the connections it accepted.
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    socklen_t size = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        ++accepted_;
        char buffer[65536];
        ssize_t n;
        while ((n = ::recv(client, buffer, sizeof buffer, 0)) > 0) {
          if (::send(client, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
        }
        ::close(client);
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  return fd;
}

// Sends `data` through the tunnel and reads back as much; what came back.
std::string round_trip(int tunnel_port, const std::string& data) {
  const int fd = connect_to(tunnel_port);
  std::thread writer([&] { (void)::send(fd, data.data(), data.size(), MSG_NOSIGNAL); });
  std::string back;
  char buffer[65536];
  while (back.size() < data.size()) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    back.append(buffer, static_cast<size_t>(n));
  }
  writer.join();
  ::close(fd);
  return back;
}

class PageTunnelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/cnlab-page-tunnel-XXXXXX";
    dir_ = ::mkdtemp(name);
    ca_ = std::make_unique<TestClusterCa>(dir_ / "cluster");
    // The source, node-a, serves the pages of a job moving to node-b.
    auto gate = PageGate::open("127.0.0.1", echo_.port(), ca_->node("node-a"), "node-b");
    ASSERT_TRUE(gate) << gate.error().to_string();
    gate_ = std::move(*gate);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // What `tls` gets through a tunnel to the gate, expecting the gate to be `source`'s.
  std::string through(const NodeTls& tls, const std::string& source, const std::string& data) {
    auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, tls, source);
    EXPECT_TRUE(tunnel) << tunnel.error().to_string();
    return tunnel ? round_trip((*tunnel)->port(), data) : "";
  }

  EchoServer echo_;
  std::filesystem::path dir_;
  std::unique_ptr<TestClusterCa> ca_;
  std::unique_ptr<PageGate> gate_;
};

TEST_F(PageTunnelTest, BytesGoThroughTheGateAndTunnelBothWays) {
  auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, ca_->node("node-b"), "node-a");
  ASSERT_TRUE(tunnel) << tunnel.error().to_string();
  EXPECT_EQ(round_trip((*tunnel)->port(), "page 1"), "page 1");
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + (i >> 12));
  EXPECT_EQ(round_trip((*tunnel)->port(), big), big);
  EXPECT_EQ(echo_.accepted(), 2);
}

TEST_F(PageTunnelTest, AnotherNodeOfTheClusterGetsNothingThrough) {
  EXPECT_EQ(through(ca_->node("node-c"), "node-a", "page 1"), "");
  EXPECT_EQ(echo_.accepted(), 0);
}

TEST_F(PageTunnelTest, ATunnelRefusesAGateThatIsNotTheSourceNode) {
  EXPECT_EQ(through(ca_->node("node-b"), "node-x", "page 1"), "");
  EXPECT_EQ(echo_.accepted(), 0);
}

TEST_F(PageTunnelTest, ACertificateFromAnotherClustersCaGetsNothingThrough) {
  TestClusterCa other(dir_ / "other");
  EXPECT_EQ(through(other.node("node-b"), "node-a", "page 1"), "");
  EXPECT_EQ(echo_.accepted(), 0);
}

TEST_F(PageTunnelTest, AMissingCertificateIsAnErrorNamingIt) {
  NodeTls missing{"node-b", (dir_ / "nope.pem").string(), (dir_ / "nope.key").string(), ca_->ca_cert()};
  auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, missing, "node-a");
  ASSERT_FALSE(tunnel);
  EXPECT_NE(tunnel.error().message.find("nope.pem"), std::string::npos) << tunnel.error().to_string();
}

}  // namespace
}  // namespace cnlab::agent
