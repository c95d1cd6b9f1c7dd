// The client commands, one registration function per file; client_commands.cpp adds them all and
// gives each the shared connection flags (--server, --token, --ca).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

#include "cli/client_config.h"

namespace cnlab::cli {

void add_admin_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);
void add_node_commands(CLI::App& admin, std::shared_ptr<ClientFlags> flags);  // node_command.cpp: admin node ...
void add_audit_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);
void add_run_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);     // run_command.cpp
void add_logs_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);    // logs_command.cpp
void add_cancel_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);  // cancel_command.cpp
void add_migrate_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);  // migrate_command.cpp
void add_ps_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);        // ps_command.cpp
void add_describe_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);  // describe_command.cpp
void add_cluster_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags);  // cluster_commands.cpp: nodes, gpus
void add_quota_command(CLI::App& app, std::shared_ptr<ClientFlags> flags);     // quota_command.cpp
// These two take no shared connection flags: login defines its own --server, --token and --ca.
void add_login_command(CLI::App& app);       // login_command.cpp
void add_completion_command(CLI::App& app);  // completion_command.cpp
// The bash completion script for `root`'s command tree (every command, option and value option),
// completing job ids for commands with a JOB argument through `PROGRAM ps -o name`.
std::string bash_completion_script(CLI::App& root, const std::string& program);

}  // namespace cnlab::cli
