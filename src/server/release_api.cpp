// POST /v1/jobs/{id}/release: the agent of a node a checkpointable job was pre-empted off says it
// has stopped the job there, after storing the checkpoint it took as the job stopped (PUT
// /v1/jobs/{id}/checkpoint) or finding it could take none. The job may then start again
// (job_release.h). Body: {"checkpoint": "sha256:..."} (the digest it stored, if any), {"message":
// "..."} (why there is none). Only the nodes that ran the job's latest attempt may call it; a call
// the job does not wait for changes nothing and is answered with the job as it is.
#include <fmt/format.h>

#include "common/json_reader.h"
#include "server/api.h"
#include "server/api_error.h"
#include "server/job_release.h"
#include "server/job_writes.h"
#include "server/request_body.h"

namespace cnlab::server {

net::Response Api::release_job(const Call& call) {
  const std::string& id = call.param("id");
  const std::string& node = call.caller.node;
  if (!call.caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", call.caller.user,
                                    "only the agent of a node the job ran on releases it"));
  }
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  if (!cached.object || !model::ran_latest_attempt_on(*cached.object, node)) {
    return error_response(Error::not_found("job", id, "no such job ran on node " + node));
  }
  auto body = parse_optional_body(call.request);
  if (!body) return error_response(body.error());
  JsonReader r(*body, "");
  r.only({"checkpoint", "message"});
  std::string digest = r.string_or("checkpoint", "");
  std::string message = r.string_or("message", "");
  if (r.status() && !digest.empty()) {
    if (auto valid = model::validate_digest(digest, r.path_of("checkpoint")); !valid) r.fail(valid.error());
  }
  if (message.size() > 1000) {
    r.fail(Error::invalid_argument(r.path_of("message"), message.substr(0, 40) + "...", "at most 1000 bytes"));
  }
  if (!r.status()) return error_response(r.status().error());

  Json detail = Json::object();
  if (!digest.empty()) detail["checkpoint"] = digest;
  if (!message.empty()) detail["message"] = message;
  Json audit = audit_record(call, "jobs.release", id, "ok", detail);
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        if (!model::ran_latest_attempt_on(job, node)) return Error::not_found("job", id, "no such job ran on node " + node);
        // Named as the job's latest: stored by this stop (an older one would be refused a resume).
        const bool stored = !digest.empty() && job.status.checkpoint && job.status.checkpoint->digest == digest;
        std::string how = stored ? fmt::format("node {} stopped it and stored its checkpoint", node)
                                 : fmt::format("node {} stopped it without a new checkpoint{}", node,
                                               message.empty() ? "" : " (" + message + ")");
        return release_from(job, node, call.now, how);
      },
      audit.dump());
  if (!updated) return error_response(updated.error());
  if (*updated) ctx_.wake_scheduler();
  auto now_cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  return json_response(200, job_json(*now_cached.object));
}

}  // namespace cnlab::server
