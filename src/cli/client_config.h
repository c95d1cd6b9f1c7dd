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

// A request whose answer must be 2xx JSON; other answers become an Error with the server's message.
Result<Json> call_json(const ClientFlags& flags, const std::string& method, const std::string& target,
                       const Json& body = nullptr);

// Prints an error the way every command does, and returns the documented exit code (2 for bad
// input, 1 otherwise).
int report(const Error& error);

}  // namespace cnlab::cli
