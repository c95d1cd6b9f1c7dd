// Checkpoints on demand and live migration (POST /v1/jobs/{id}/checkpoint, /migrate): the user's
// side. Who may: whoever may cancel the job (its owner with cancel-own, or cancel-any in its
// project). Both are audited; the agents do the work (see migrations.h).
#include <fmt/format.h>

#include "server/api.h"
#include "server/api_error.h"
#include "server/job_writes.h"
#include "server/migrations.h"

namespace cnlab::server {
namespace {

bool may_act_on(const Caller& caller, const model::Job& job) {
  return caller.can(job.spec.project, auth::Action::kCancelAny) ||
         (job.spec.user == caller.user && caller.can(job.spec.project, auth::Action::kCancelOwn));
}

}  // namespace

Result<Cached<model::Job>> Api::job_to_act_on(const Call& call, const std::string& action, const std::string& verb) {
  const std::string& id = call.param("id");
  auto cached = visible_job(call, id);
  if (!cached || call.caller.is_node()) return Error::not_found("job", id, "no such job");
  const model::Job& seen = *cached->object;
  if (!may_act_on(call.caller, seen)) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "job", id, "your role may " + verb + " only your own jobs");
    audit_refusal(call, action, seen.spec.project + "/" + id, denied);
    return denied;
  }
  return cached;
}

net::Response Api::request_checkpoint(const Call& call) {
  const std::string& id = call.param("id");
  auto cached = job_to_act_on(call, "jobs.checkpoint_request", "checkpoint");
  if (!cached) return error_response(cached.error());
  // It takes no fields: a body, if any, is an empty object.
  auto body = parse_optional_body(call.request);
  if (!body) return error_response(body.error());
  JsonReader fields(*body, "");
  fields.only({});
  if (!fields.status()) return error_response(fields.status().error());
  const std::string target = cached->object->spec.project + "/" + id;
  Json audit = audit_record(call, "jobs.checkpoint_request", target, "ok", Json::object());
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        if (!job.spec.checkpointable) {
          return Error::failed_precondition("job " + id + " is not checkpointable (spec.checkpointable)");
        }
        if (job.status.phase != model::JobPhase::kRunning) {
          return Error::of(ErrorCode::kConflict, "job", id,
                           "the job is " + std::string(to_string(job.status.phase)) + "; only a Running job is checkpointed");
        }
        job.status.checkpoint_requested_at = call.now;
        return true;
      },
      audit.dump());
  if (!updated) return error_response(updated.error());
  auto now_cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  return json_response(202, job_json(*now_cached.object));
}

net::Response Api::migrate_job(const Call& call) {
  const std::string& id = call.param("id");
  auto cached = job_to_act_on(call, "jobs.migrate", "migrate");
  if (!cached) return error_response(cached.error());
  const model::Job& seen = *cached->object;
  const std::string target = seen.spec.project + "/" + id;
  auto body = parse_optional_body(call.request);
  if (!body) return error_response(body.error());
  JsonReader r(*body, "");
  r.only({"to"});
  std::string to = r.string_or("to", "");
  if (!r.status()) return error_response(r.status().error());
  if (to.empty() && body->contains("to")) {
    return error_response(Error::invalid_argument("to", "", "name a node, or leave `to` out for the one with the most room"));
  }
  if (seen.status.placement.size() != 1) {
    return error_response(Error::failed_precondition("job " + id + " cannot migrate: " + migration_refusal(seen, nullptr)));
  }
  const std::string source = seen.status.placement.front().node;
  // Checked and recorded with no scheduler cycle in between, nor another migrate request: neither
  // can then spend the room this move counts on.
  auto no_cycle = ctx_.hold_scheduler();
  // The target: the one asked for, or the node (not the source) that can take the job with the
  // most free CPU; and the GPUs it takes there.
  auto chosen = ctx_.cache.read([&](const ObjectCache& c) -> Result<MigrationTarget> {
    auto from = c.nodes.get(source);
    if (!from.object) return Error::failed_precondition("job " + id + " cannot migrate: its node " + source + " is gone");
    if (std::string why = migration_refusal(seen, from.object.get()); !why.empty()) {
      return Error::failed_precondition("job " + id + " cannot migrate: " + why);
    }
    const auto room = free_room(c);
    if (to.empty()) return roomiest_migration_target(c, seen, *from.object, room);
    auto node = c.nodes.get(to);
    if (!node.object) return Error::not_found("to", to, "no such node");
    if (to == source) return Error::invalid_argument("to", to, "the job already runs there; name another node");
    std::string why = migration_target_refusal(seen, *from.object, *node.object, room.at(to));
    if (!why.empty()) return Error::of(ErrorCode::kFailedPrecondition, "to", to, why);
    return MigrationTarget{to, *migration_target_gpus(seen, *from.object, *node.object, room.at(to))};
  });
  if (!chosen) return error_response(chosen.error());
  if (!chosen->gpus.new_instances.empty()) {
    // The MIG instance it moves into is created on the target first; a move that fails after
    // leaves it there, free for the next job of that profile.
    Json instances = Json::array();
    for (const auto& [index, instance] : chosen->gpus.new_instances) {
      instances.push_back({{"gpu", index}, {"profile", instance.profile}, {"start", instance.start}});
    }
    Json layout_audit = audit_record(call, "nodes.mig_layout", chosen->node, "ok", {{"job", id}, {"added", instances}});
    if (auto added = add_mig_instances(ctx_.store, ctx_.cache, chosen->node, chosen->gpus.new_instances, layout_audit.dump());
        !added) {
      return error_response(added.error());
    }
  }
  Json audit = audit_record(call, "jobs.migrate", target, "ok", {{"from", source}, {"to", chosen->node}});
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        if (std::string why = migration_refusal(job, nullptr); !why.empty()) {
          return Error::failed_precondition("job " + id + " cannot migrate: " + why);
        }
        ask_to_migrate(job, *chosen, call.now, "requested by " + call.caller.user);
        return true;
      },
      audit.dump());
  if (!updated) return error_response(updated.error());
  auto now_cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  return json_response(202, job_json(*now_cached.object));
}

}  // namespace cnlab::server
