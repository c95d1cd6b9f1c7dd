#include "cli/client_config.h"

#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cnlab::cli {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string config_path() {
  std::string base = env("XDG_CONFIG_HOME");
  if (base.empty()) base = env("HOME") + "/.config";
  return base + "/cnlab/config";
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

Result<net::ClientOptions> resolve_client(const ClientFlags& flags) {
  Json file = Json::object();
  std::ifstream in(config_path());
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    file = Json::parse(text.str(), nullptr, false);
    if (!file.is_object()) return Error::invalid_argument("config", config_path(), "not a JSON object");
  }
  auto pick = [&](const std::string& flag, const char* variable, const char* key) {
    if (!flag.empty()) return flag;
    if (std::string value = env(variable); !value.empty()) return value;
    return file.value(key, std::string());
  };
  net::ClientOptions options;
  options.url = pick(flags.server, "CNLAB_SERVER", "server");
  options.token = trim(pick(flags.token, "CNLAB_TOKEN", "token"));
  options.ca_file = pick(flags.ca, "CNLAB_CA", "ca");
  if (options.url.empty()) {
    return Error::invalid_argument("--server", "", "no server: pass --server URL, set CNLAB_SERVER, or write server, token and ca into ~/.config/cnlab/config (JSON)");
  }
  // A token may be given as a file (e.g. DIR/admin.token).
  std::error_code ec;
  if (!options.token.empty() && options.token.size() < 4096 && std::filesystem::is_regular_file(options.token, ec)) {
    std::ifstream token_file(options.token);
    if (token_file) {
      std::stringstream text;
      text << token_file.rdbuf();
      options.token = trim(text.str());
    }
  }
  return options;
}

Result<Json> call_json(const ClientFlags& flags, const std::string& method, const std::string& target, const Json& body) {
  auto options = resolve_client(flags);
  if (!options) return options.error();
  auto client = net::Client::connect(*options);
  if (!client) return client.error();
  auto response = (*client)->request(method, target, body.is_null() ? "" : body.dump(),
                                     {{"content-type", "application/json"}});
  if (!response) return response.error();
  Json json = Json::parse(response->body, nullptr, false);
  if (response->status >= 200 && response->status < 300) {
    if (json.is_discarded()) return Error::internal("the server answered with something that is not JSON");
    return json;
  }
  return net::error_from_response(response->status, response->body, "");
}

int report(const Error& error) {
  std::fprintf(stderr, "cnlab: %s\n", error.to_string().c_str());
  return error.code == ErrorCode::kInvalidArgument ? 2 : 1;
}

}  // namespace cnlab::cli
