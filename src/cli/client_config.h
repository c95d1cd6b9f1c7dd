// Where the CLI finds its server: flags first, then CNLAB_SERVER / CNLAB_TOKEN / CNLAB_CA, then the
// config file (~/.config/cnlab/config, JSON {"server", "token", "ca"}; $XDG_CONFIG_HOME honoured).
#pragma once

#include <memory>
#include <string>

#include "common/json_reader.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::cli {

struct ClientFlags {
  std::string server;
  std::string token;
  std::string ca;
};

Result<net::ClientOptions> resolve_client(const ClientFlags& flags);

// ~/.config/cnlab/config ($XDG_CONFIG_HOME honoured).
std::string config_path();

// Writes the config file (mode 0600, its directory 0700), replacing it whole; `cnlab login` and
// `cnlab dev` use it. The CA is stored as an absolute path.
Status write_config(const std::string& server, const std::string& token, const std::string& ca);

// A connected client for commands that make several requests (`cnlab run`, `cnlab logs -f`).
Result<std::unique_ptr<net::Client>> connect(const ClientFlags& flags);

// A request whose answer must be 2xx JSON; other answers become an Error with the server's message.
Result<Json> call_json(const ClientFlags& flags, const std::string& method, const std::string& target,
                       const Json& body = nullptr);

// Prints an error the way every command does (with a hint to log in again for an expired or
// revoked credential) and returns its documented exit code (exit_codes.h).
int report(const Error& error);

}  // namespace cnlab::cli
