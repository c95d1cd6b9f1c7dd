// The face of src/server: the control plane (`cnlab server`) and the commands that prepare and run
// it. Everything else in this folder is private to it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/result.h"
#include "sched/policy_config.h"

namespace cnlab::server {

struct ServerConfig {
  std::string data_dir;
  // Where checkpoint archives are kept (--checkpoint-dir); empty: <data_dir>/checkpoints. Created
  // (0700) when missing; every node reaches them through the server either way.
  std::string checkpoint_dir;
  std::string listen = "127.0.0.1:8443";
  bool plain_http = false;  // only on a loopback address
  // A node whose agent is silent this long is NotReady; this much longer, Lost (its jobs requeued).
  Duration not_ready_after{40};
  Duration lost_after{300};
  // Priority class -> how long a running job's GPU slice may go unused before it is reclaimed
  // (idle_reclaim.h); classes not listed are never reclaimed.
  std::map<std::string, Duration> idle_reclaim_after{{"dev", Duration{2 * 3600}}, {"opportunistic", Duration{30 * 60}}};
  // Priority class -> interval of periodic (transparent) checkpoints of its checkpointable jobs
  // (migrations.h); classes not listed are checkpointed only on pre-emption or request.
  std::map<std::string, Duration> checkpoint_every{
      {"production", Duration{3600}}, {"dev", Duration{3600}}, {"opportunistic", Duration{1800}}};
  // A migration whose target has not taken the job over this long after the freeze is rolled back.
  Duration migration_timeout{120};
  // A job pre-empted off a node waits this long at most for the node's agent to stop it and store
  // its checkpoint before it may start again elsewhere (job_release.h).
  Duration release_timeout{300};
  // The scheduling loop runs this long after a change (collecting a burst into one cycle), and at
  // least this often.
  std::chrono::milliseconds schedule_debounce{10};
  std::chrono::milliseconds schedule_period{1000};
  sched::PolicyConfig policy;
  size_t max_body_bytes = 1 << 20;                  // a JSON request body
  size_t max_upload_bytes = size_t{512} << 20;      // one workspace archive or artifact
  size_t max_artifact_bytes_per_job = size_t{1} << 30;  // all of one job's artifacts together
  // One checkpoint archive: a process checkpoint is as big as the job's memory. Spooled to disk as
  // it arrives, and refused up front when the disk has no room for it.
  size_t max_checkpoint_bytes = size_t{64} << 30;
  size_t max_log_bytes_per_job = size_t{256} << 20;
  int worker_threads = 64;
  int64_t history_revisions = 100000;  // changes kept for watches from a past revision
  int io_threads = 2;
  // Outside identity provider (RS256/ES256), optional.
  std::string jwks_file;
  std::string external_issuer;
  std::string audience = "cnlab";
};

class ControlPlane {
 public:
  // Opens the data directory prepared by `cnlab server init`, the store, and starts serving.
  static Result<std::unique_ptr<ControlPlane>> start(const ServerConfig& config);
  virtual ~ControlPlane() = default;
  virtual std::string url() const = 0;
  // Stops the loop, the API and the store (in that order). Idempotent.
  virtual void stop() = 0;
};

// `cnlab server init`: a private CA (DIR/ca.pem), the server's certificate and key, the token
// signing key and the first admin token (DIR/admin.token, mode 0600).
struct InitOptions {
  std::string data_dir;
  std::vector<std::string> hostnames;  // extra DNS names / IPs for the certificate
  Duration admin_token_ttl = 365 * kDay;
};
Status init_data_dir(const InitOptions& options);

// Adds `server` (init and serve) to the CLI; the handlers exit the process with their status.
void add_server_commands(CLI::App& app);

}  // namespace cnlab::server
