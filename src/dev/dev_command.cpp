// `cnlab dev`: a complete CNLab on this machine until Ctrl-C. The first stdout line is
// "listening on URL" (scripts and tests read it); by then the node is Ready and the CLI of the same
// HOME is configured with the admin credential, so `cnlab run` works at once.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/client_config.h"
#include "cli/exit_codes.h"
#include "common/stop_signals.h"
#include "common/time.h"
#include "dev/dev.h"
#include "dev/dev_cluster.h"

namespace cnlab::dev {
namespace {

struct DevFlags {
  DevConfig config;
  std::string stop_grace = "10s";
  std::string scheduler_config;
  bool no_config = false;
};

int fail(const Error& error) {
  std::fprintf(stderr, "cnlab dev: %s\n", error.to_string().c_str());
  return cli::exit_code_for(error.code);
}

int run_dev(DevFlags& flags) {
  if (flags.config.data_dir.empty()) flags.config.data_dir = default_data_dir();
  auto grace = parse_duration(flags.stop_grace, "--stop-grace");
  if (!grace) return fail(grace.error());
  flags.config.stop_grace = std::chrono::duration_cast<std::chrono::milliseconds>(*grace);
  if (!flags.scheduler_config.empty()) {
    auto policy = sched::policy_config_from_file(flags.scheduler_config, "--scheduler-config");
    if (!policy) return fail(policy.error());
    flags.config.policy = std::move(*policy);
  }

  // Logs go to stderr: stdout carries what the user and scripts read.
  spdlog::set_default_logger(spdlog::stderr_color_mt("cnlab-dev"));
  StopSignals signals;  // before any thread starts
  auto cluster = DevCluster::start(flags.config);
  if (!cluster) return fail(cluster.error());
  const DevInfo& info = (*cluster)->info();
  std::string configured = "not written (--no-config)";
  if (!flags.no_config) {
    if (auto written = cli::write_config(info.url, info.admin_token, info.ca_file); !written) {
      (*cluster)->stop();
      return fail(written.error());
    }
    configured = cli::config_path();
  }
  std::printf("listening on %s\n", info.url.c_str());
  std::printf("node %s: %s\n", info.node.c_str(), info.gpus.c_str());
  std::printf("data: %s\n", flags.config.data_dir.c_str());
  std::printf("cli: %s (admin credential)\n", configured.c_str());
  std::printf("try: cnlab run examples/train.py --gpu h100-25   (Ctrl-C here stops the cluster; state is kept)\n");
  std::fflush(stdout);
  int signal = signals.wait();
  spdlog::info("dev: stopping signal={}", signal);
  std::fprintf(stderr, "cnlab dev: stopping (running jobs are stopped; state is kept in %s)\n",
               flags.config.data_dir.c_str());
  (*cluster)->stop();
  return cli::kExitOk;
}

}  // namespace

void add_dev_commands(CLI::App& app) {
  auto flags = std::make_shared<DevFlags>();
  auto* dev = app.add_subcommand("dev", "Run a complete single-machine CNLab (server and agent) until Ctrl-C");
  dev->add_option("--data-dir", flags->config.data_dir, "Where state is kept (default ~/.local/share/cnlab)");
  dev->add_option("--listen", flags->config.listen, "HOST:PORT to serve the API on; port 0 picks a free one")
      ->capture_default_str();
  dev->add_option("--simulate-gpus", flags->config.simulate_gpus,
                  "Simulated GPUs, e.g. h100x2 or h100x8,l4x2 (default: this machine's GPUs; h100x2 if it has none)");
  dev->add_option("--name", flags->config.node_name, "The node's name (default: the host name)");
  dev->add_option("--metrics-listen", flags->config.metrics_listen, "Where the agent serves /metrics (\"\" for none)")
      ->capture_default_str();
  dev->add_option("--stop-grace", flags->stop_grace, "SIGTERM to SIGKILL for a stopped job")->capture_default_str();
  dev->add_option("--scheduler-config", flags->scheduler_config,
                  "JSON file of scheduler policy settings, as `cnlab server` takes it (migration for room, "
                  "drains, tiers...; see docs/scheduler.md)");
  dev->add_flag("--no-config", flags->no_config, "Do not write the CLI's config file (~/.config/cnlab/config)");
  dev->footer(
      "Example:\n"
      "  cnlab dev &                       # then, in the same HOME:\n"
      "  cnlab run examples/train.py --gpu h100-25\n"
      "  cnlab dev --simulate-gpus h100x8,l4x2 --data-dir /tmp/cnlab --listen 127.0.0.1:0");
  dev->callback([flags] { std::exit(run_dev(*flags)); });
}

}  // namespace cnlab::dev
