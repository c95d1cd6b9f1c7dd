// The REST API under /v1: routing, authentication, and one handler per endpoint (their bodies live
// in one file per resource: jobs_api.cpp, nodes_api.cpp, access_api.cpp, audit_api.cpp,
// watch_api.cpp, workspaces_api.cpp, artifacts_api.cpp, checkpoints_api.cpp). Handlers run on the
// HTTP server's worker pool and may block on the store. Request bodies are at most
// ServerConfig::max_body_bytes except on the upload routes (workspaces, artifacts, checkpoints),
// which take up to max_upload_bytes.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "auth/auth.h"
#include "net/net.h"
#include "server/access.h"
#include "server/admission.h"
#include "server/data_dir.h"
#include "server/job_logs.h"
#include "server/job_waiting.h"
#include "server/metrics.h"
#include "server/object_cache.h"
#include "server/router.h"
#include "server/watch_fanout.h"
#include "server/server.h"
#include "store/store.h"

namespace cnlab::server {

struct Call {
  const net::Request& request;
  const Caller& caller;
  const std::map<std::string, std::string>& params;
  Time now;
  const std::string& param(const std::string& name) const { return params.at(name); }
};

// What the API needs from its surroundings; owned by the ControlPlane.
struct ApiContext {
  const ServerConfig& config;
  DataDir dir;
  store::Store& store;
  auth::Verifier& verifier;
  auth::VerifierOptions signing;  // for minting tokens
  Metrics& metrics;
  ObjectCache& cache;
  QuotaLedger& quotas;
  JobLogs& logs;
  std::function<void()> wake_scheduler;
  std::function<Time()> clock;
  std::function<JobWaiting(const std::string&)> waiting;  // the scheduler's, for a pending job
  std::function<NodeIdle(const std::string&)> node_idle;  // the scheduler's, for a node
  // The scheduler's: no cycle decides while the lock is held (see SchedulerLoop::hold_decisions).
  std::function<std::unique_lock<std::mutex>()> hold_scheduler;
};

// A request's body as a JSON object, or an error naming "body".
Result<Json> parse_body(const net::Request& request);
// parse_body for endpoints whose body is optional: an empty one is {}.
Result<Json> parse_optional_body(const net::Request& request);

class Api {
 public:
  explicit Api(ApiContext context);
  net::Response handle(const net::Request& request);
  // The body a request may send, decided from its head before the body is read: uploads (from a
  // caller that sent a credential) up to the upload limit, checkpoints up to the checkpoint limit,
  // both within what the disk holds; everything else the JSON limit.
  size_t body_limit(const std::string& method, const std::string& path,
                    const std::map<std::string, std::string>& headers) const;
  // Where the HTTP layer writes a request's body as it arrives ("" : in memory): uploads
  // (workspaces, artifacts, checkpoints) go to the incoming directory of the store that keeps
  // them, so that the handler renames the file into place and no upload is held in memory.
  std::string spool_dir(const std::string& method, const std::string& path) const;
  // Refuses an upload (workspace, artifact, checkpoint) from its head alone when its credential
  // does not verify (401, as the handler would), before its body is read or stored: a forged or
  // expired token cannot make the server take in 512 MiB. Other routes: nullopt.
  std::optional<net::Response> admit(const net::Request& head) const;

 private:
  using Handler = net::Response (Api::*)(const Call&);
  enum class Body {
    kJson,        // up to max_body_bytes, in memory
    kUpload,      // up to max_upload_bytes, spooled to a file (Request::body_file)
    kCheckpoint,  // up to max_checkpoint_bytes, spooled to a file
  };
  // The data directory's store an upload route keeps its bodies in (its spool is there).
  using StoreDir = std::string (DataDir::*)() const;
  void route(const std::string& method, const std::string& pattern, Handler handler, bool public_route = false,
             Body body = Body::kJson, StoreDir store = nullptr);
  size_t limit_of(Body body) const;

  // Commits `ops` with an audit record of the caller's action; the records written are applied to
  // the cache before it returns.
  Result<store::TxnResult> commit(const Call& call, std::vector<store::Op> ops, const std::string& action,
                                  const std::string& target, Json detail = Json::object());
  // Appends an audit record of a refused request (does not wait for it).
  void audit_refusal(const Call& call, const std::string& action, const std::string& target, const Error& error);
  Json audit_record(const Call& call, const std::string& action, const std::string& target, const std::string& outcome,
                    Json detail) const;

  // jobs_api.cpp
  net::Response submit_job(const Call& call);
  net::Response list_jobs(const Call& call);
  // GET /v1/jobs?view=summary, from the cache; `project` and `node` already checked by list_jobs.
  net::Response list_job_summaries(const Call& call, const std::string& project, const std::string& node);
  net::Response get_job(const Call& call);
  net::Response cancel_job(const Call& call);
  // migration_api.cpp
  // The job of the call's {id}, when the caller may checkpoint or migrate it (as for cancel); a
  // refusal is audited as `action`.
  Result<Cached<model::Job>> job_to_act_on(const Call& call, const std::string& action, const std::string& verb);
  net::Response request_checkpoint(const Call& call);
  net::Response migrate_job(const Call& call);
  net::Response job_events(const Call& call);
  net::Response report_job_status(const Call& call);
  net::Response get_logs(const Call& call);
  net::Response post_logs(const Call& call);
  // The job as served: the scheduler's current waiting reason filled in.
  Json job_json(const model::Job& job) const;
  // The full view of the jobs bound to `node` that `selector` and `visible` keep, from the cache's
  // index by node (a node lists its jobs whole, so no paging), with the revision to watch from.
  Json node_jobs(const std::string& node, const store::Selector& selector,
                 const std::function<bool(const Json&)>& visible) const;
  // Finds a job the caller may see; another project's job is "not found". With `incoming`, a node
  // also sees a job moving to it (its peer endpoint checks that a dump sent to it was asked for).
  Result<Cached<model::Job>> visible_job(const Call& call, const std::string& id, bool incoming = false);

  // nodes_api.cpp
  net::Response register_node(const Call& call);
  net::Response heartbeat(const Call& call);
  net::Response list_nodes(const Call& call);
  net::Response get_node(const Call& call);
  net::Response cordon_node(const Call& call);
  net::Response uncordon_node(const Call& call);
  net::Response drain_node(const Call& call);
  net::Response set_node_schedulable(const Call& call, bool cordon, bool drain);
  // The node as served: what its jobs hold on each GPU, and since when it has had none (the
  // scheduler's view).
  Json node_view(const model::Node& node, const Allocation* allocation, int64_t releasing = 0,
                 int64_t migrating = 0) const;
  // node_certificates_api.cpp
  net::Response issue_node_certificate(const Call& call);

  // access_api.cpp
  net::Response create_project(const Call& call);
  net::Response list_projects(const Call& call);
  net::Response get_project(const Call& call);
  net::Response create_user(const Call& call);
  net::Response list_users(const Call& call);
  net::Response create_role_binding(const Call& call);
  net::Response list_role_bindings(const Call& call);
  net::Response delete_role_binding(const Call& call);
  net::Response put_quota(const Call& call);
  net::Response list_quotas(const Call& call);
  net::Response delete_quota(const Call& call);
  net::Response create_token(const Call& call);
  net::Response list_tokens(const Call& call);
  net::Response revoke_token(const Call& call);
  net::Response create_join_token(const Call& call);
  net::Response list_join_tokens(const Call& call);
  net::Response revoke_join_token(const Call& call);
  net::Response whoami(const Call& call);

  // audit_api.cpp
  net::Response list_audit(const Call& call);
  net::Response verify_audit(const Call& call);

  // workspaces_api.cpp
  net::Response put_workspace(const Call& call);
  net::Response head_workspace(const Call& call);
  net::Response get_workspace(const Call& call);
  // The stored workspace named by its hex digest; kNotFound when there is none.
  Result<model::Workspace> stored_workspace(const std::string& hex);
  // Whether the caller may read `workspace`: a user who sees one of the projects it was uploaded
  // to, or a node with a job bound to it that names the workspace. A node that names the job
  // (`job`, from ?job=ID: agents do) has that job alone looked at, not every job in the cache.
  bool may_read_workspace(const Caller& caller, const model::Workspace& workspace, const std::string& job = "") const;
  // Whether a job of `project` submitted by `caller` may run in `workspace`: it was uploaded to
  // that project, or the caller may read it anyway (and so could upload it there).
  bool may_use_workspace(const Caller& caller, const std::string& project, const model::Workspace& workspace) const;

  // artifacts_api.cpp
  net::Response put_artifact(const Call& call);
  net::Response list_artifacts(const Call& call);
  net::Response get_artifact(const Call& call);

  // checkpoints_api.cpp
  net::Response put_checkpoint(const Call& call);
  net::Response get_checkpoint(const Call& call);
  // release_api.cpp
  net::Response release_job(const Call& call);

  // watch_api.cpp: `?watch=1&revision=N` on a collection. `visible` decides per object (parsed
  // once per event however many watchers there are). A `route` (jobs: a node name) limits the
  // changes considered to those routed there now or before (see WatchFanout); `visible` must
  // still check it, for the history replayed. With `report_leaving`, an object that stops being
  // visible (a job pre-empted off the watching node) is sent once as DELETED, as Kubernetes does
  // for selectors; `visible_now` are the keys visible when the watch starts.
  net::Response watch(const Call& call, const std::string& kind, std::function<bool(const Json&)> visible,
                      std::string route = "", bool report_leaving = false, std::vector<std::string> visible_now = {});
  // The shared watch of a kind, started on first use.
  Result<WatchFanout*> fanout_of(const std::string& kind);

  ApiContext ctx_;
  Router router_;
  struct Entry {
    Handler handler;
    bool public_route;
    Body body;
    StoreDir store;  // with an upload body: where it is spooled
  };
  std::vector<Entry> handlers_;
  std::mutex fanouts_mutex_;
  std::map<std::string, std::unique_ptr<WatchFanout>> fanouts_;
};

}  // namespace cnlab::server
