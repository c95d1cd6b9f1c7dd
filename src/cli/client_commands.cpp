// Registers every client command and gives each the connection flags.
#include "cli/cli.h"
#include "cli/commands.h"

namespace cnlab::cli {
namespace {

// The flags may follow a nested command (`cnlab admin project create vision --server URL`).
void fall_through(CLI::App* command) {
  command->fallthrough();
  for (CLI::App* sub : command->get_subcommands({})) fall_through(sub);
}

}  // namespace

void add_client_commands(CLI::App& app) {
  auto flags = std::make_shared<ClientFlags>();
  const size_t before = app.get_subcommands({}).size();
  add_admin_commands(app, flags);
  add_audit_commands(app, flags);
  add_run_command(app, flags);
  add_logs_command(app, flags);
  add_cancel_command(app, flags);
  add_migrate_commands(app, flags);
  add_ps_command(app, flags);
  add_describe_command(app, flags);
  add_cluster_commands(app, flags);
  add_quota_command(app, flags);
  auto all = app.get_subcommands({});
  for (size_t i = before; i < all.size(); ++i) {
    CLI::App* command = all[i];
    command->add_option("--server", flags->server, "Server URL (else CNLAB_SERVER, else the config file)");
    command->add_option("--token", flags->token, "Bearer token or a file holding it (else CNLAB_TOKEN)");
    command->add_option("--ca", flags->ca, "CA certificate the server's certificate chains to (else CNLAB_CA)");
    fall_through(command);
  }
  // After the loop: they must not get the shared flags (login's own would clash).
  add_login_command(app);
  add_completion_command(app);
}

}  // namespace cnlab::cli
