// `cnlab agent`: the node daemon's command line. Runs until SIGINT or SIGTERM; its jobs keep
// running when it stops, and the next agent on the same --data-dir adopts them.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "agent/agent.h"
#include "agent/gpu/gpu.h"
#include "common/stop_signals.h"
#include "common/time.h"

namespace cnlab::agent {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::string self_executable() {
  char path[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "cnlab";
}

int fail(const Error& error) {
  std::fprintf(stderr, "cnlab agent: %s\n", error.to_string().c_str());
  return error.code == ErrorCode::kInvalidArgument ? 2 : 1;
}

struct AgentFlags {
  AgentConfig config;
  std::vector<std::string> labels;
  std::string heartbeat = "5s";
  std::string grace = "10s";
  std::string checkpoint_grace = "30s";
  std::string certificate_check = "1h";
  std::string migration_progress = "10s";
  bool no_cgroups = false;
  bool no_namespaces = false;
  bool no_vgpu = false;
  bool stop_jobs = false;
};

int run_agent(AgentFlags& flags) {
  AgentConfig& config = flags.config;
  if (config.server.empty()) config.server = env_or("CNLAB_SERVER", "");
  if (config.ca_file.empty()) config.ca_file = env_or("CNLAB_CA", "");
  if (config.join_token.empty()) config.join_token = env_or("CNLAB_JOIN_TOKEN", "");
  for (const auto& label : flags.labels) {
    auto eq = label.find('=');
    if (eq == std::string::npos || eq == 0) return fail(Error::invalid_argument("--label", label, "expected KEY=VALUE"));
    config.labels[label.substr(0, eq)] = label.substr(eq + 1);
  }
  auto heartbeat = parse_duration(flags.heartbeat, "--heartbeat-interval");
  if (!heartbeat) return fail(heartbeat.error());
  auto grace = parse_duration(flags.grace, "--stop-grace");
  if (!grace) return fail(grace.error());
  config.heartbeat_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*heartbeat);
  config.stop_grace = std::chrono::duration_cast<std::chrono::milliseconds>(*grace);
  auto checkpoint_grace = parse_duration(flags.checkpoint_grace, "--checkpoint-grace");
  if (!checkpoint_grace) return fail(checkpoint_grace.error());
  config.checkpoint_grace = std::chrono::duration_cast<std::chrono::milliseconds>(*checkpoint_grace);
  auto certificate_check = parse_duration(flags.certificate_check, "--certificate-check-interval");
  if (!certificate_check) return fail(certificate_check.error());
  config.certificate_check_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*certificate_check);
  auto migration_progress = parse_duration(flags.migration_progress, "--migration-progress-every");
  if (!migration_progress) return fail(migration_progress.error());
  if (migration_progress->count() <= 0) {
    return fail(Error::invalid_argument("--migration-progress-every", flags.migration_progress, "must be positive"));
  }
  config.migration_progress_every = std::chrono::duration_cast<std::chrono::milliseconds>(*migration_progress);
  config.use_cgroups = !flags.no_cgroups;
  config.use_namespaces = !flags.no_namespaces;
  config.use_vgpu = !flags.no_vgpu;
  config.shim_command = default_shim_command();

  spdlog::set_default_logger(spdlog::stderr_color_mt("cnlab-agent"));
  StopSignals signals;  // before any thread starts
  auto agent = Agent::start(config);
  if (!agent) return fail(agent.error());
  std::printf("agent %s running%s%s\n", (*agent)->node_name().c_str(),
              (*agent)->metrics_url().empty() ? "" : "; metrics on ", (*agent)->metrics_url().c_str());
  std::fflush(stdout);
  spdlog::info("stopping signal={}", signals.wait());
  (*agent)->stop(flags.stop_jobs);
  return 0;
}

}  // namespace

std::vector<std::string> default_shim_command() {
  std::string self = self_executable();
  std::string shim = self.substr(0, self.rfind('/') + 1) + "cnlab-shim";
  return ::access(shim.c_str(), X_OK) == 0 ? std::vector<std::string>{shim} : std::vector<std::string>{self, "agent-shim"};
}

std::string default_vgpu_library() {
  std::string self = self_executable();
  return self.substr(0, self.rfind('/') + 1) + "libcnlab-vgpu.so";
}

int count_nvidia_gpus(const std::string& nvml_library) {
  auto nvml = NvmlBackend::open({nvml_library});
  return static_cast<int>(nvml->gpus().size());
}

void add_agent_commands(CLI::App& app) {
  auto flags = std::make_shared<AgentFlags>();
  AgentConfig& c = flags->config;
  auto* cmd = app.add_subcommand("agent", "Run the node agent: register this machine's GPUs and run the jobs bound to it");
  cmd->footer(
      "Example:\n  cnlab agent --server https://cp:8443 --ca ca.pem --join-token $(cat join.token) --data-dir /var/lib/cnlab-agent\n"
      "  cnlab agent --server https://127.0.0.1:8443 --join-token T --data-dir /tmp/a --simulate-gpus h100x8,l4x2\n"
      "CNLAB_SERVER, CNLAB_CA and CNLAB_JOIN_TOKEN stand in for the flags.");
  cmd->add_option("--server", c.server, "The control plane's URL (env CNLAB_SERVER)");
  cmd->add_option("--ca", c.ca_file, "The CA the server's certificate chains to (env CNLAB_CA)");
  cmd->add_option("--join-token", c.join_token, "A join token; needed until the node credential is stored (env CNLAB_JOIN_TOKEN)");
  cmd->add_option("--data-dir", c.data_dir, "Where the agent keeps its credential, jobs and workspace cache")->required();
  cmd->add_option("--name", c.node_name, "The node's name (default: the host name)");
  cmd->add_option("--label", flags->labels, "A node label KEY=VALUE (repeatable)");
  cmd->add_option("--simulate-gpus", c.simulate_gpus, "Simulated GPUs instead of NVML, e.g. h100x8,l4x2 (for machines without GPUs)");
  cmd->add_option("--nvml-library", c.nvml_library, "The NVML library to load")->capture_default_str();
  cmd->add_option("--run-as", c.run_as, "The unprivileged user jobs run as (default: the agent's own user)");
  cmd->add_flag("--no-cgroups", flags->no_cgroups, "Run jobs without cgroups (no CPU, memory or pids limits)");
  cmd->add_flag("--no-namespaces", flags->no_namespaces, "Run jobs without their own PID, mount, IPC and UTS namespaces");
  cmd->add_option("--cgroup-parent", c.cgroup_parent, "The cgroup jobs' cgroups go under (as <parent>/<node>/<job>)")->capture_default_str();
  cmd->add_option("--cpu-milli", c.cpu_milli, "Host CPU offered to jobs, in thousandths of a core (default: all)");
  cmd->add_option("--memory-mib", c.memory_mib, "Host memory offered to jobs, in MiB (default: all)");
  cmd->add_option("--address", c.address, "The address other nodes reach this one at (a gang's MASTER_ADDR; default: the host name)");
  c.metrics_listen = "127.0.0.1:9402";
  cmd->add_option("--metrics-listen", c.metrics_listen, "Where /metrics is served (plain HTTP, loopback only; \"\" for none)")
      ->capture_default_str();
  cmd->add_option("--heartbeat-interval", flags->heartbeat, "How often the node reports")->capture_default_str();
  cmd->add_option("--stop-grace", flags->grace, "SIGTERM to SIGKILL when a job is cancelled or pre-empted")->capture_default_str();
  cmd->add_option("--checkpoint-grace", flags->checkpoint_grace,
                  "SIGUSR1 to SIGTERM when a checkpointable job is pre-empted (time to save its checkpoint)")
      ->capture_default_str();
  cmd->add_option("--vgpu-library", c.vgpu_library,
                  "libcnlab-vgpu.so, loaded into every job holding a GPU (default: the one beside this binary)");
  cmd->add_flag("--no-vgpu", flags->no_vgpu, "Run jobs without libcnlab-vgpu.so (no VRAM quota, compute share or IPC isolation)");
  cmd->add_option("--criu", c.criu,
                  "The CRIU binary for transparent checkpoints and live migration (default: found in sbin/bin; "
                  "\"none\": off)");
  cmd->add_option("--cuda-checkpoint", c.cuda_checkpoint,
                  "NVIDIA's cuda-checkpoint, with which transparent checkpoints and restores carry a job's GPU memory "
                  "and contexts (default: found in /usr/local/bin, /usr/bin; \"none\": jobs holding GPUs save their own "
                  "state on SIGUSR1)");
  cmd->add_flag("--post-copy", c.post_copy,
                "Live migrations post-copy (CRIU lazy pages): the job runs on the target at once and pulls its memory "
                "from this node's --address over mutual TLS (node certificates)");
  cmd->add_option("--peer-port", c.peer_port,
                  "The port on --address where other agents stream migrating jobs here over mutual TLS (0: any free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--certificate-check-interval", flags->certificate_check,
                  "How often the node certificate is checked and, with a third of its life left, renewed")
      ->capture_default_str();
  cmd->add_option("--migration-progress-every", flags->migration_progress,
                  "How often a migration's source tells the server it is still dumping, packing or sending the "
                  "job (keep it well under the server's --migration-timeout)")
      ->capture_default_str();
  cmd->add_flag("--stop-jobs-on-exit", flags->stop_jobs, "Stop the running jobs when the agent stops (default: they keep running and are adopted)");
  cmd->callback([flags] { std::exit(run_agent(*flags)); });
}

}  // namespace cnlab::agent
