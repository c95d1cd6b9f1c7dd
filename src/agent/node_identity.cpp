#include "agent/node_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cnlab::agent {
namespace {

std::string path_in(const std::string& data_dir) { return data_dir + "/node.json"; }

}  // namespace

Result<NodeIdentity> load_identity(const std::string& data_dir) {
  std::string path = path_in(data_dir);
  std::ifstream in(path);
  if (!in) return Error::not_found("node.json", path, "no node credential stored yet");
  std::stringstream text;
  text << in.rdbuf();
  Json json = Json::parse(text.str(), nullptr, false);
  if (!json.is_object() || !json.contains("name") || !json.contains("token") || !json["name"].is_string() ||
      !json["token"].is_string()) {
    return Error::invalid_argument("node.json", path, "expected {\"name\": ..., \"token\": ...}; remove it to register again");
  }
  return NodeIdentity{json["name"].get<std::string>(), json["token"].get<std::string>()};
}

Status save_identity(const std::string& data_dir, const NodeIdentity& identity) {
  std::string path = path_in(data_dir);
  std::string temp = path + ".tmp";
  std::string text = Json{{"name", identity.name}, {"token", identity.token}}.dump() + "\n";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Error::internal("cannot write " + temp + ": " + std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    return Error::internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

Result<NodeIdentity> register_node(const ServerAddress& server, const std::string& join_token, const model::Node& node,
                                   const std::string& data_dir) {
  if (join_token.empty()) {
    return Error::invalid_argument("--join-token", "",
                                   "this node has no stored credential; a join token is needed to register it "
                                   "(cnlab admin join-token create)");
  }
  ServerApi api(server, "");
  Json body = {{"join_token", join_token}, {"node", model::to_json(node)}};
  auto answer = api.call("POST", "/v1/nodes", body.dump());
  if (!answer) return answer.error();
  NodeIdentity identity{node.meta.name, answer->value("token", "")};
  if (identity.token.empty()) return Error::internal("POST /v1/nodes answered without a token");
  if (auto saved = save_identity(data_dir, identity); !saved) return saved.error();
  return identity;
}

}  // namespace cnlab::agent
