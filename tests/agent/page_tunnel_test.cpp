// The post-copy page stream's TLS gate and tunnel on loopback: bytes go through both ways to the
// backend (an echo server standing in for CRIU's page server), and a tunnel that has the wrong
// fingerprint or the wrong token never reaches it.
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
    auto gate = PageGate::open("127.0.0.1", echo_.port(), dir_);
    ASSERT_TRUE(gate) << gate.error().to_string();
    gate_ = std::move(*gate);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  EchoServer echo_;
  std::filesystem::path dir_;
  std::unique_ptr<PageGate> gate_;
};

TEST_F(PageTunnelTest, BytesGoThroughTheGateAndTunnelBothWays) {
  EXPECT_EQ(gate_->fingerprint().size(), 64u);
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "its one-time key is not left on disk";
  EXPECT_EQ(gate_->token().size(), 64u);
  auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, gate_->fingerprint(), gate_->token());
  ASSERT_TRUE(tunnel) << tunnel.error().to_string();
  EXPECT_EQ(round_trip((*tunnel)->port(), "page 1"), "page 1");
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + (i >> 12));
  EXPECT_EQ(round_trip((*tunnel)->port(), big), big);
  EXPECT_EQ(echo_.accepted(), 2);
}

TEST_F(PageTunnelTest, ATunnelThatDoesNotKnowTheGatesCertificateGetsNothingThrough) {
  std::string other = gate_->fingerprint();
  other[0] = other[0] == 'a' ? 'b' : 'a';
  auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, other, gate_->token());
  ASSERT_TRUE(tunnel);
  EXPECT_EQ(round_trip((*tunnel)->port(), "page 1"), "");
  EXPECT_EQ(echo_.accepted(), 0);
}

TEST_F(PageTunnelTest, APeerWithoutTheTokenGetsNothingThrough) {
  std::string other = gate_->token();
  other[5] = other[5] == '0' ? '1' : '0';
  auto tunnel = PageTunnel::open({"127.0.0.1", gate_->port()}, gate_->fingerprint(), other);
  ASSERT_TRUE(tunnel);
  EXPECT_EQ(round_trip((*tunnel)->port(), "page 1"), "");
  EXPECT_EQ(echo_.accepted(), 0);
}

TEST_F(PageTunnelTest, AFingerprintOrTokenOfTheWrongShapeIsRefused) {
  EXPECT_FALSE(PageTunnel::open({"127.0.0.1", gate_->port()}, "abc", gate_->token()));
  EXPECT_FALSE(PageTunnel::open({"127.0.0.1", gate_->port()}, gate_->fingerprint(), ""));
}

}  // namespace
}  // namespace cnlab::agent
