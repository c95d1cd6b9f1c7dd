// The client commands, one registration function per file; client_commands.cpp adds them all and
// gives each the shared connection flags (--server, --token, --ca).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

#include "cli/client_config.h"

namespace cnlab::cli {

void add_admin_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);
void add_audit_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);

}  // namespace cnlab::cli
