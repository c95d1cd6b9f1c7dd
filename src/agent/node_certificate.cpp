#include "agent/node_certificate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "net/tls_files.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Whether the stored certificate is node `node`'s with more than a third of its life left.
bool still_good(const NodeTls& tls) {
  std::error_code ec;
  if (!fs::exists(tls.key_file, ec) || !fs::exists(tls.ca_file, ec)) return false;
  auto info = net::read_cert_info(read_all(tls.cert_file));
  if (!info) return false;
  const auto& names = info->dns_names;
  if (std::find(names.begin(), names.end(), net::node_dns_name(tls.node)) == names.end()) return false;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  return now < info->not_after - (info->not_after - info->not_before) / 3;
}

}  // namespace

Result<NodeTls> ensure_node_certificate(const ServerAddress& server, const std::string& token,
                                        const std::string& data_dir, const std::string& node, bool* renewed) {
  const fs::path dir = fs::path(data_dir) / "tls";
  NodeTls tls{node, (dir / "node.pem").string(), (dir / "node.key").string(), (dir / "ca.pem").string()};
  if (renewed) *renewed = false;
  if (still_good(tls)) return tls;
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::permissions(dir, fs::perms::owner_all, ec);
  auto made = net::create_key_and_request(node);
  if (!made) return made.error();
  ServerApi api(server, token);
  auto answer = api.call("POST", "/v1/nodes/" + node + "/certificate", Json{{"csr", made->request_pem}}.dump());
  if (!answer) return answer.error();
  const std::string cert = answer->value("certificate", ""), ca = answer->value("ca", "");
  if (cert.empty() || ca.empty()) return Error::internal("the server answered without a certificate and its CA");
  // The key first: a certificate on disk always has its key beside it.
  for (const auto& [path, text, mode] : {std::tuple{tls.key_file, made->key_pem, 0600u},
                                         std::tuple{tls.cert_file, cert, 0644u}, std::tuple{tls.ca_file, ca, 0644u}}) {
    if (auto written = net::write_private_file(path, text, mode); !written) return written.error();
  }
  spdlog::info("node certificate issued node=\"{}\" until=\"{}\"", node, answer->value("expires_at", ""));
  if (renewed) *renewed = true;
  return tls;
}

}  // namespace cnlab::agent
