// A cluster CA in a temporary directory and node certificates from it, as the server would issue
// them (net::issue_node_cert), for tests of what agents show each other.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "agent/node_certificate.h"
#include "net/tls_files.h"

namespace cnlab::agent {

class TestClusterCa {
 public:
  explicit TestClusterCa(const std::filesystem::path& dir) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    auto made = net::create_ca(ca_cert(), (dir_ / "ca.key").string(), "cnlab test cluster CA", 2);
    EXPECT_TRUE(made) << made.error().to_string();
  }
  std::string ca_cert() const { return (dir_ / "ca.pem").string(); }

  NodeTls node(const std::string& name) const {
    NodeTls tls{name, (dir_ / (name + ".pem")).string(), (dir_ / (name + ".key")).string(), ca_cert()};
    auto made = net::create_key_and_request(name);
    EXPECT_TRUE(made) << made.error().to_string();
    auto cert = net::issue_node_cert(ca_cert(), (dir_ / "ca.key").string(), made->request_pem, name, 1);
    EXPECT_TRUE(cert) << cert.error().to_string();
    EXPECT_TRUE(net::write_private_file(tls.key_file, made->key_pem, 0600));
    EXPECT_TRUE(net::write_private_file(tls.cert_file, *cert, 0644));
    return tls;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace cnlab::agent
