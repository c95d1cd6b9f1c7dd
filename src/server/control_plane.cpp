// Wires the control plane together: data directory, store, cache, access, the API, the scheduling
// loop and node lifecycle, metrics. Also `cnlab server init`.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "net/net.h"
#include "server/api.h"
#include "server/blob_files.h"
#include "server/idle_reclaim.h"
#include "server/migrations.h"
#include "server/node_drain.h"
#include "server/node_lifecycle.h"
#include "server/scheduler_loop.h"

namespace cnlab::server {
namespace {

Time system_now() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

// The --checkpoint-dir given: absolute, a directory (made 0700 when missing), one the server can
// write its uploads into.
Result<std::string> open_checkpoint_dir(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::absolute(given, ec).lexically_normal();
  if (ec) return Error::invalid_argument("--checkpoint-dir", given, "cannot resolve: " + ec.message());
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return Error::invalid_argument("--checkpoint-dir", given, "cannot create: " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
  }
  if (!fs::is_directory(dir, ec)) return Error::invalid_argument("--checkpoint-dir", given, "not a directory");
  std::string root = dir.string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  if (auto incoming = blob_incoming_dir(root); !incoming) {
    return Error::invalid_argument("--checkpoint-dir", given, "cannot write there: " + incoming.error().message);
  }
  return root;
}

// Checkpoint archives that jobs still to run name and `root` lacks (--checkpoint-dir changed without
// moving them, a disk replaced): said once, at start, since those jobs would start again from the
// beginning.
void warn_of_missing_checkpoints(const ObjectCache& cache, const std::string& root) {
  constexpr size_t kNamedAtMost = 5;
  size_t named = 0;
  std::vector<std::string> missing;
  cache.read([&](const ObjectCache& c) {
    c.jobs.for_each([&](const std::string& name, const model::Job& job, int64_t) {
      if (model::is_terminal(job.status.phase) || !job.status.checkpoint) return;
      ++named;
      if (!blob_file(root, model::workspace_name(job.status.checkpoint->digest))) missing.push_back(name);
    });
    return 0;
  });
  if (missing.empty()) return;
  const auto shown = missing.begin() + static_cast<std::ptrdiff_t>(std::min(missing.size(), kNamedAtMost));
  spdlog::warn("checkpoint archives missing count={} of={} dir=\"{}\" jobs=\"{}{}\"; those jobs start again without "
               "them (if --checkpoint-dir changed, move the archives there)",
               missing.size(), named, root, fmt::join(missing.begin(), shown, ","),
               missing.size() > kNamedAtMost ? ",..." : "");
}

class ControlPlaneImpl final : public ControlPlane {
 public:
  explicit ControlPlaneImpl(const ServerConfig& config) : config_(config) {}
  ~ControlPlaneImpl() override { stop(); }

  Status open() {
    dir_.root = config_.data_dir;
    auto secret = read_file(dir_.signing_key());
    if (!secret) {
      return Error::invalid_argument("--data-dir", config_.data_dir,
                                     "not an initialised data directory (run `cnlab server init --data-dir DIR`): " +
                                         secret.error().to_string());
    }
    if (!config_.checkpoint_dir.empty()) {
      auto checkpoints = open_checkpoint_dir(config_.checkpoint_dir);
      if (!checkpoints) return checkpoints.error();
      dir_.checkpoint_root = *checkpoints;
      spdlog::info("checkpoint archives kept in dir=\"{}\"", dir_.checkpoint_root);
    }
    signing_.hs256_secret = *secret;
    signing_.audience = config_.audience;
    signing_.jwks_file = config_.jwks_file;
    signing_.external_issuer = config_.external_issuer;
    auto verifier = auth::Verifier::create(signing_);
    if (!verifier) return verifier.error();
    verifier_ = std::move(*verifier);

    auto store = store::open_sqlite_store({.path = dir_.store(), .history_revisions = config_.history_revisions});
    if (!store) return store.error();
    store_ = std::move(*store);
    cache_ = std::make_unique<ObjectCache>(*store_);
    logs_ = std::make_unique<JobLogs>(dir_.logs(), config_.max_log_bytes_per_job);
    loop_ = std::make_unique<SchedulerLoop>(*store_, *cache_, metrics_, config_, system_now);
    cache_->subscribe([this](const Change& change) {
      if (*change.kind != kind::kJobs) return;
      auto job = cache_->read([&](const ObjectCache& c) { return c.jobs.get(*change.key); });
      quotas_.observe(*change.key, job.object.get());
    });
    loop_->attach();
    if (auto started = cache_->start(); !started) return started;
    warn_of_missing_checkpoints(*cache_, dir_.checkpoints());
    lifecycle_ = std::make_unique<NodeLifecycle>(*store_, *cache_, config_, system_now, [this] { loop_->wake(); });
    idle_reclaim_ = std::make_unique<IdleReclaim>(*store_, *cache_, config_.idle_reclaim_after, system_now);
    migrations_ = std::make_unique<MigrationWatch>(*store_, *cache_, config_.migration_timeout, config_.checkpoint_every,
                                                   system_now, [this] { loop_->wake(); }, metrics_.migrations);
    drain_ = std::make_unique<NodeDrain>(
        *store_, *cache_, [this] { return loop_->hold_decisions(); }, [this] { loop_->wake(); }, system_now);
    metrics_.on_render([this] { refresh_gauges(); });

    // What an upload cut off by a crash left on its way in.
    for (const std::string& root : {dir_.workspaces(), dir_.artifacts(), dir_.checkpoints()}) {
      if (auto cleared = clear_blob_incoming(root); !cleared) {
        spdlog::warn("leftover uploads not removed root=\"{}\" error=\"{}\"", root, cleared.error().to_string());
      }
    }
    api_ = std::make_unique<Api>(ApiContext{config_, dir_, *store_, *verifier_, signing_, metrics_, *cache_, quotas_,
                                            *logs_, [this] { loop_->wake(); }, system_now,
                                            [this](const std::string& id) { return loop_->waiting(id); },
                                            [this](const std::string& node) { return loop_->idle(node); },
                                            [this] { return loop_->hold_decisions(); }});
    net::ServerOptions options;
    options.listen = config_.listen;
    options.tls = !config_.plain_http;
    options.cert_file = dir_.server_cert();
    options.key_file = dir_.server_key();
    options.io_threads = config_.io_threads;
    options.worker_threads = config_.worker_threads;
    // Watches of busy collections get a write every few milliseconds rather than one per change.
    options.stream_coalesce = std::chrono::milliseconds(4);
    // Uploads (workspaces, artifacts, checkpoints) must reach their handlers; every other route is
    // held to max_body_bytes before its body is read.
    options.max_body_bytes = std::max({config_.max_body_bytes, config_.max_upload_bytes, config_.max_checkpoint_bytes});
    options.body_limit_for = [this](const std::string& method, const std::string& path,
                                    const std::map<std::string, std::string>& headers) {
      return api_->body_limit(method, path, headers);
    };
    options.spool_dir_for = [this](const std::string& method, const std::string& path) {
      return api_->spool_dir(method, path);
    };
    options.admit = [this](const net::Request& head) { return api_->admit(head); };
    auto server = net::Server::start(options, [this](const net::Request& r) { return api_->handle(r); });
    if (!server) return server.error();
    server_ = std::move(*server);
    loop_->start();
    lifecycle_->start();
    // A pass every tenth of the shortest limit (at most every 10 s), so a slice is reclaimed within
    // about a tenth of its limit past it.
    auto shortest = std::chrono::milliseconds(10000);
    for (const auto& [cls, limit] : config_.idle_reclaim_after) {
      shortest = std::min(shortest, std::chrono::duration_cast<std::chrono::milliseconds>(limit) / 10);
    }
    idle_reclaim_->start(std::max(shortest, std::chrono::milliseconds(100)));
    migrations_->start();
    drain_->start();
    loop_->wake();
    spdlog::info("server started url=\"{}\" data_dir=\"{}\" revision={}", server_->url(), config_.data_dir, store_->revision());
    return Status::ok();
  }

  std::string url() const override { return server_ ? server_->url() : ""; }

  void stop() override {
    if (stopped_) return;
    stopped_ = true;
    if (idle_reclaim_) idle_reclaim_->stop();
    if (migrations_) migrations_->stop();
    if (drain_) drain_->stop();
    if (lifecycle_) lifecycle_->stop();
    if (loop_) loop_->stop();
    if (server_) server_->stop();
    if (cache_) cache_->stop();
    if (store_) store_->close();
  }

 private:
  void refresh_gauges() {
    metrics_.jobs.clear();
    metrics_.blocks_allocated.clear();
    metrics_.blocks_free.clear();
    metrics_.nodes.clear();
    cache_->read([&](const ObjectCache& c) {
      std::map<std::pair<std::string, std::string>, double> jobs;
      double migrating = 0;
      std::map<std::string, int64_t> archives;  // digest -> bytes: jobs may name the same one
      c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) {
        jobs[{std::string(to_string(job.status.phase)), job.spec.priority_class}] += 1;
        if (job.status.migration) migrating += 1;
        if (job.status.checkpoint) archives[job.status.checkpoint->digest] = job.status.checkpoint->size_bytes;
        for (const auto& older : job.status.older_checkpoints) archives[older.digest] = older.size_bytes;
      });
      for (const auto& [key, count] : jobs) metrics_.jobs.set({{"phase", key.first}, {"class", key.second}}, count);
      metrics_.jobs_migrating.set({}, migrating);
      double archive_bytes = 0;
      for (const auto& [digest, bytes] : archives) archive_bytes += static_cast<double>(bytes);
      metrics_.checkpoint_bytes.set({}, archive_bytes);
      // Allocated: held by jobs anywhere. Free: on schedulable nodes' healthy GPUs, not held.
      std::map<std::string, double> allocated, free, nodes;
      c.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
        nodes[std::string(to_string(node.phase))] += 1;
        std::map<int, double> held;
        if (auto a = c.allocations.get(name); a.object) {
          for (const auto& [job, gpus] : a.object->jobs) {
            for (const auto& g : gpus) held[g.index] += g.blocks;
          }
        }
        for (const auto& g : node.gpus) {
          std::string m(model::gpu_model(g.model).name);
          allocated[m] += held[g.index];
          free[m] += node.schedulable() && g.healthy ? std::max(0.0, model::kBlocksPerGpu - held[g.index]) : 0.0;
        }
      });
      for (const auto& [m, blocks] : allocated) {
        metrics_.blocks_allocated.set({{"model", m}}, blocks);
        metrics_.blocks_free.set({{"model", m}}, free[m]);
      }
      for (const auto& [phase, count] : nodes) metrics_.nodes.set({{"phase", phase}}, count);
      return 0;
    });
    metrics_.power_down_candidates.set({}, static_cast<double>(loop_->power_down_candidates()));
  }

  ServerConfig config_;
  DataDir dir_;
  auth::VerifierOptions signing_;
  std::unique_ptr<auth::Verifier> verifier_;
  std::unique_ptr<store::Store> store_;
  Metrics metrics_;
  std::unique_ptr<ObjectCache> cache_;
  QuotaLedger quotas_;
  std::unique_ptr<JobLogs> logs_;
  std::unique_ptr<SchedulerLoop> loop_;
  std::unique_ptr<NodeLifecycle> lifecycle_;
  std::unique_ptr<IdleReclaim> idle_reclaim_;
  std::unique_ptr<MigrationWatch> migrations_;
  std::unique_ptr<NodeDrain> drain_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<net::Server> server_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<ControlPlane>> ControlPlane::start(const ServerConfig& config) {
  auto plane = std::make_unique<ControlPlaneImpl>(config);
  if (auto opened = plane->open(); !opened) return opened.error();
  return std::unique_ptr<ControlPlane>(std::move(plane));
}

Status init_data_dir(const InitOptions& options) {
  namespace fs = std::filesystem;
  DataDir dir{options.data_dir, ""};
  std::error_code ec;
  if (fs::exists(dir.signing_key(), ec)) {
    return Error::of(ErrorCode::kAlreadyExists, "--data-dir", options.data_dir,
                     "already initialised; use it as it is, or choose an empty directory");
  }
  fs::create_directories(options.data_dir, ec);
  if (ec) return Error::invalid_argument("--data-dir", options.data_dir, "cannot create: " + ec.message());
  fs::permissions(options.data_dir, fs::perms::owner_all, ec);
  for (const auto& sub : {dir.logs(), dir.artifacts(), dir.workspaces()}) fs::create_directories(sub, ec);

  if (auto ca = net::create_ca(dir.ca_cert(), dir.ca_key(), "CNLab private CA", 3650); !ca) return ca;
  std::vector<std::string> dns = {"localhost"}, ips = {"127.0.0.1", "::1"};
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') dns.push_back(host);
  for (const auto& name : options.hostnames) {
    bool ip = name.find_first_not_of("0123456789.:abcdefABCDEF") == std::string::npos &&
              (name.find('.') != std::string::npos || name.find(':') != std::string::npos) &&
              name.find_first_of("0123456789") != std::string::npos;
    (ip ? ips : dns).push_back(name);
  }
  if (auto cert = net::issue_server_cert(dir.ca_cert(), dir.ca_key(), dir.server_cert(), dir.server_key(), dns, ips, 825);
      !cert) {
    return cert;
  }
  std::string secret = auth::random_hex(32);
  if (auto written = write_file(dir.signing_key(), secret, 0600); !written) return written;

  auto store = store::open_sqlite_store({.path = dir.store()});
  if (!store) return store.error();
  Time now = system_now();
  model::User admin;
  admin.meta.name = "admin";
  admin.display_name = "Cluster administrator";
  model::RoleBinding binding;
  binding.meta.name = "cluster.admin";
  binding.user = "admin";
  binding.project = "*";
  binding.role = "admin";
  model::Project project;
  project.meta.name = "default";
  project.description = "The project jobs go to when none is named";
  model::ApiToken token;
  token.meta.name = auth::random_hex(16);
  token.user = "admin";
  token.project = "default";
  token.expires_at = now + options.admin_token_ttl;
  token.created_by = "cnlab server init";
  Json audit = {{"time", format_rfc3339(now)}, {"actor", "cnlab server init"}, {"action", "server.init"},
                {"target", options.data_dir}, {"outcome", "ok"}};
  auto committed = (*store)->txn({store::Op::create(kind::kUsers, "admin", to_json(admin).dump()),
                                  store::Op::create(kind::kRoleBindings, binding.meta.name, to_json(binding).dump()),
                                  store::Op::create(kind::kProjects, "default", to_json(project).dump()),
                                  store::Op::create(kind::kApiTokens, token.meta.name, to_json(token).dump())},
                                 audit.dump());
  if (!committed) return committed.error();
  (*store)->close();
  auth::VerifierOptions signing;
  signing.hs256_secret = secret;
  std::string jwt = auth::mint_hs256({"admin", "default", token.meta.name, options.admin_token_ttl}, signing, now);
  return write_file(dir.admin_token(), jwt + "\n", 0600);
}

}  // namespace cnlab::server
