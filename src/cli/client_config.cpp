#include "cli/client_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/exit_codes.h"

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

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

std::string config_path() {
  std::string base = env("XDG_CONFIG_HOME");
  if (base.empty()) base = env("HOME") + "/.config";
  return base + "/cnlab/config";
}

Status write_config(const std::string& server, const std::string& token, const std::string& ca) {
  namespace fs = std::filesystem;
  const std::string path = config_path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Error::internal("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  ::chmod(fs::path(path).parent_path().c_str(), 0700);
  Json config = {{"server", server}, {"token", token}};
  if (!ca.empty()) config["ca"] = fs::absolute(ca, ec).string();
  // Written beside and renamed over, created 0600: the token is never readable by others, not even
  // for a moment, and a crash leaves the old file whole.
  const std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error::internal("cannot write " + temp + ": " + std::strerror(errno));
  const std::string text = config.dump(2) + "\n";
  bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    return Error::internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

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

Result<std::unique_ptr<net::Client>> connect(const ClientFlags& flags) {
  auto options = resolve_client(flags);
  if (!options) return options.error();
  return net::Client::connect(*options);
}

Result<Json> call_json(const ClientFlags& flags, const std::string& method, const std::string& target, const Json& body) {
  auto client = connect(flags);
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
  if (error.code == ErrorCode::kUnauthenticated) {
    std::fprintf(stderr, "cnlab: your credential was refused (expired, revoked or missing); log in again with\n"
                         "       cnlab login --server URL --token TOKEN [--ca CA_FILE]\n");
  }
  return exit_code_for(error.code);
}

}  // namespace cnlab::cli
