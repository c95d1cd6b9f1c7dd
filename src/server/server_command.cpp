// `cnlab server init` and `cnlab server`: prepare a data directory, and serve from it until SIGINT or
// SIGTERM. The first line on stdout is "listening on URL" so scripts and tests can find the port.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/stop_signals.h"

#include <cstdio>

#include "server/idle_reclaim.h"
#include "server/server.h"

namespace cnlab::server {
namespace {

constexpr int kOk = 0;
constexpr int kBadInput = 2;
constexpr int kFailed = 1;

int fail(const Error& error) {
  std::fprintf(stderr, "cnlab server: %s\n", error.to_string().c_str());
  return error.code == ErrorCode::kInvalidArgument || error.code == ErrorCode::kAlreadyExists ? kBadInput : kFailed;
}

int serve(ServerConfig config) {
  // Logs go to stderr: stdout carries only the "listening on URL" line scripts read.
  spdlog::set_default_logger(spdlog::stderr_color_mt("cnlab"));
  StopSignals signals;  // before any thread starts
  auto plane = ControlPlane::start(config);
  if (!plane) return fail(plane.error());
  std::printf("listening on %s\n", (*plane)->url().c_str());
  std::fflush(stdout);
  spdlog::info("stopping signal={}", signals.wait());
  (*plane)->stop();
  return kOk;
}

}  // namespace

void add_server_commands(CLI::App& app) {
  auto* server = app.add_subcommand("server", "Run the control plane (or prepare its data directory with `init`)");
  server->require_subcommand(0, 1);
  auto config = std::make_shared<ServerConfig>();
  auto not_ready = std::make_shared<std::string>("40s");
  auto lost = std::make_shared<std::string>("5m");
  auto idle = std::make_shared<std::string>("dev=2h,opportunistic=30m");
  auto checkpoint_every = std::make_shared<std::string>("production=1h,dev=1h,opportunistic=30m");
  auto migration_timeout = std::make_shared<std::string>("2m");
  auto release_timeout = std::make_shared<std::string>("5m");
  auto scheduler_config = std::make_shared<std::string>();
  server->add_option("--data-dir", config->data_dir, "The data directory `cnlab server init` prepared");
  server->add_option("--listen", config->listen, "HOST:PORT to serve on; port 0 picks a free port")
      ->capture_default_str();
  server->add_flag("--plain-http", config->plain_http, "Serve plain HTTP (only on a loopback address)");
  server->add_option("--jwks", config->jwks_file, "JWKS file of an outside identity provider (RS256/ES256)");
  server->add_option("--issuer", config->external_issuer, "The outside identity provider's issuer (iss)");
  server->add_option("--audience", config->audience, "The audience (aud) every token must carry")->capture_default_str();
  server->add_option("--not-ready-after", *not_ready, "A silent node becomes NotReady after this")->capture_default_str();
  server->add_option("--lost-after", *lost, "A silent node becomes Lost (its jobs requeued) after this")->capture_default_str();
  server->add_option("--idle-reclaim", *idle,
                     "Stop a running job whose GPU slice is unused this long, per class (CLASS=DURATION,...; none)")
      ->capture_default_str();
  server->add_option("--workers", config->worker_threads, "Request worker threads")->capture_default_str();
  server->add_option("--max-upload-bytes", config->max_upload_bytes,
                     "The largest workspace archive or artifact one request may upload")
      ->capture_default_str();
  server->add_option("--max-artifact-bytes-per-job", config->max_artifact_bytes_per_job,
                     "The most bytes of artifacts one job may keep")
      ->capture_default_str();
  server->add_option("--checkpoint-every", *checkpoint_every,
                     "Periodic transparent checkpoints of checkpointable jobs per priority class, such as "
                     "production=1h,dev=30m (\"none\": only on pre-emption or request)")
      ->capture_default_str();
  server->add_option("--migration-timeout", *migration_timeout,
                     "A live migration whose target has not taken the job over this long after the freeze is rolled "
                     "back to the source")
      ->capture_default_str();
  server->add_option("--release-timeout", *release_timeout,
                     "A checkpointable job pre-empted off a node waits this long at most for the node to stop it and "
                     "store its checkpoint before it may start again elsewhere")
      ->capture_default_str();
  server->add_option("--scheduler-config", *scheduler_config,
                     "JSON file of scheduler policy settings (tiers, fair share, backfill, migration for room...; "
                     "see docs/scheduler.md); absent settings keep their defaults");
  server->add_option("--checkpoint-dir", config->checkpoint_dir,
                     "Where checkpoint archives are kept (default DATA_DIR/checkpoints): a larger volume, for "
                     "instance; created (mode 0700) when missing");
  server->add_option("--max-checkpoint-bytes", config->max_checkpoint_bytes,
                     "The largest checkpoint archive an agent may upload for a job")
      ->capture_default_str();
  server->add_option("--history-revisions", config->history_revisions,
                     "Changes kept for watches from a past revision (older ones get 410)")
      ->capture_default_str();

  auto* init = server->add_subcommand("init", "Prepare a data directory: CA, certificate, signing key, admin token");
  auto hostnames = std::make_shared<std::vector<std::string>>();
  init->add_option("--data-dir", config->data_dir, "The directory to prepare (created, mode 0700)");
  init->add_option("--hostname", *hostnames, "Extra DNS name or IP address for the server certificate");

  server->final_callback([server, init, config, hostnames, not_ready, lost, idle, checkpoint_every, migration_timeout,
                          release_timeout, scheduler_config]() {
    if (config->data_dir.empty()) std::exit(fail(Error::invalid_argument("--data-dir", "", "required")));
    if (init->parsed()) {
      InitOptions options{config->data_dir, *hostnames};
      if (auto done = init_data_dir(options); !done) std::exit(fail(done.error()));
      std::printf("initialised %s\nCA certificate: %s/ca.pem\nadmin token: %s/admin.token\n", config->data_dir.c_str(),
                  config->data_dir.c_str(), config->data_dir.c_str());
      std::exit(kOk);
    }
    auto nr = parse_duration(*not_ready, "--not-ready-after");
    auto lo = parse_duration(*lost, "--lost-after");
    if (!nr) std::exit(fail(nr.error()));
    if (!lo) std::exit(fail(lo.error()));
    config->not_ready_after = *nr;
    config->lost_after = *lo;
    auto limits = parse_idle_limits(*idle);
    if (!limits) std::exit(fail(limits.error()));
    config->idle_reclaim_after = *limits;
    auto every = parse_idle_limits(*checkpoint_every, "--checkpoint-every");
    if (!every) std::exit(fail(every.error()));
    config->checkpoint_every = *every;
    auto timeout = parse_duration(*migration_timeout, "--migration-timeout");
    if (!timeout) std::exit(fail(timeout.error()));
    if (*timeout <= Duration{0}) {
      std::exit(fail(Error::invalid_argument("--migration-timeout", *migration_timeout, "must be positive")));
    }
    config->migration_timeout = *timeout;
    auto release = parse_duration(*release_timeout, "--release-timeout");
    if (!release) std::exit(fail(release.error()));
    if (*release <= Duration{0}) {
      std::exit(fail(Error::invalid_argument("--release-timeout", *release_timeout, "must be positive")));
    }
    config->release_timeout = *release;
    if (!scheduler_config->empty()) {
      auto policy = sched::policy_config_from_file(*scheduler_config, "--scheduler-config");
      if (!policy) std::exit(fail(policy.error()));
      config->policy = std::move(*policy);
    }
    if (config->lost_after <= config->not_ready_after) {
      std::exit(fail(Error::invalid_argument("--lost-after", *lost, "must be longer than --not-ready-after")));
    }
    (void)server;
    std::exit(serve(*config));
  });
}

}  // namespace cnlab::server
