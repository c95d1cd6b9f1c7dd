// cnlab: one binary, several roles. This file only dispatches to them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string_view>

#include "agent/agent.h"
#include "agent/runtime/runtime.h"
#include "cli/cli.h"
#include "dev/dev.h"
#include "server/server.h"
#include "sim/sim.h"

int main(int argc, char** argv) {
  // The shim a job runs under: single-threaded, so it is dispatched before anything starts.
  if (argc > 1 && std::string_view(argv[1]) == "agent-shim") return cnlab::agent::shim_main(argc - 1, argv + 1);
  CLI::App app{"cnlab: a GPU-cluster platform that shares, schedules and moves GPU work"};
  app.require_subcommand(0, 1);
  app.set_help_all_flag("--help-all", "Show help for every role and command");

  auto* version = app.add_subcommand("version", "Print the version of this binary");
  auto* help = app.add_subcommand("help", "Show this help");
  cnlab::sim::add_sim_commands(app);
  cnlab::server::add_server_commands(app);
  cnlab::cli::add_client_commands(app);
  cnlab::agent::add_agent_commands(app);
  cnlab::dev::add_dev_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" that exits 0; every real one is bad input: exit 2 (docs/cli.md §5).
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (version->parsed()) {
    std::printf("cnlab %s\n", CNLAB_VERSION);
    return 0;
  }
  if (help->parsed() || app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  return 0;
}
