// `cnlab login`: checks a server URL and token (GET /v1/whoami) and only then writes them to the
// config file, so that every later command needs no flags. It takes its own --server, --token and
// --ca (they are not the shared fall-backs): a login uses exactly what it is given.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/job_listing.h"

namespace cnlab::cli {
namespace {

struct LoginArgs {
  std::string server;
  std::string token;
  std::string ca;
};

// The token itself, read from the file when `text` names one (e.g. DATA_DIR/admin.token).
std::string token_value(const std::string& text) {
  std::error_code ec;
  if (text.size() < 4096 && std::filesystem::is_regular_file(text, ec)) {
    std::ifstream in(text);
    std::stringstream content;
    content << in.rdbuf();
    std::string token = content.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    return token;
  }
  return text;
}

void run_login(const LoginArgs& args) {
  std::string server = args.server;
  while (!server.empty() && server.back() == '/') server.pop_back();
  if (server.rfind("https://", 0) != 0 && server.rfind("http://", 0) != 0) {
    fail(Error::invalid_argument("--server", args.server, "expected a URL such as https://cnlab.example.com:7443"));
  }
  std::string token = token_value(args.token);
  if (token.empty()) fail(Error::invalid_argument("--token", args.token, "empty token"));
  if (!args.ca.empty() && !std::filesystem::exists(args.ca)) {
    fail(Error::invalid_argument("--ca", args.ca, "no such file"));
  }
  auto client = net::Client::connect({server, args.ca, token});
  if (!client) fail(client.error());
  auto me = whoami(**client);
  if (!me) {
    Error error = me.error();
    if (error.code == ErrorCode::kUnauthenticated) {
      std::fprintf(stderr, "cnlab: login failed: %s\n", error.to_string().c_str());
      std::fprintf(stderr, "cnlab: the server refused the token (expired, revoked or not one of its own); "
                           "nothing was written. Ask an admin for a token (cnlab admin token create --user NAME).\n");
      std::exit(kExitAuth);
    }
    fail(error);
  }
  if (auto written = write_config(server, token, args.ca); !written) fail(written.error());

  std::string roles;
  for (const auto& [project, role] : me->roles) {
    if (!roles.empty()) roles += ", ";
    roles += (project == "*" ? std::string("every project") : project) + ": " + role;
  }
  std::printf("Logged in to %s as %s", server.c_str(), me->user.c_str());
  if (!me->default_project.empty()) std::printf(" (default project %s)", me->default_project.c_str());
  std::printf(".\n");
  std::printf("Roles: %s\n", roles.empty() ? "none yet (an admin grants one with cnlab admin rolebinding create)" : roles.c_str());
  std::printf("Saved to %s (readable only by you); try: cnlab ps\n", config_path().c_str());
  std::exit(0);
}

}  // namespace

void add_login_command(CLI::App& app) {
  auto args = std::make_shared<LoginArgs>();
  auto* login = app.add_subcommand("login", "Check a server and token, then save them for every later command");
  login->add_option("--server", args->server, "Server URL, e.g. https://cnlab.example.com:7443")->required();
  login->add_option("--token", args->token, "Your token, or a file holding it")->required();
  login->add_option("--ca", args->ca, "CA certificate the server's certificate chains to (else the system's)");
  login->footer(
      "Example:\n"
      "  cnlab login --server https://cnlab.example.com:7443 --token ~/alice.token --ca ~/cnlab-ca.pem\n"
      "  Logged in to https://cnlab.example.com:7443 as alice (default project vision).");
  login->callback([args] { run_login(*args); });
}

}  // namespace cnlab::cli
