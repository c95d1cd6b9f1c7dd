// Nodes: registration with a join token (which yields the node's credential), heartbeats, listing,
// cordon, uncordon and drain.
#include <fmt/format.h>
#include <openssl/crypto.h>

#include "server/job_release.h"
#include "server/api.h"
#include "server/api_error.h"
#include "server/migrations.h"

namespace cnlab::server {
namespace {

constexpr Duration kNodeCredentialTtl = 365 * kDay;

Result<Json> parse_object(const std::string& text) {
  Json body = Json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return Error::invalid_argument("body", text.substr(0, 64), "expected a JSON object");
  return body;
}

Json node_json(const model::Node& node) { return to_json(node); }

// Puts the MIG mode and layout of `decided`'s GPUs on the same GPUs of `reported`.
void keep_decided_layouts(const model::Node& decided, model::Node& reported) {
  for (auto& gpu : reported.gpus) {
    if (gpu.index < 0 || static_cast<size_t>(gpu.index) >= decided.gpus.size()) continue;
    const model::Gpu& d = decided.gpus[static_cast<size_t>(gpu.index)];
    if (d.model != gpu.model) continue;  // not the GPU the decision was made for
    gpu.mig_enabled = d.mig_enabled;
    gpu.mig_instances = d.mig_instances;
  }
}

// A node as the API answers it: the stored object, with what the jobs bound there hold on each GPU
// (`allocated_blocks`, `allocated_vram_mib`, `allocated_jobs`) and how many jobs are bound to it
// (`bound_jobs`: what a drain still waits for) from the node's allocation record, so that anyone
// who may list nodes sees how full each is without seeing whose jobs fill it; and how many jobs
// taken off it are still stopping there (`releasing_jobs`, job_release.h), which a drain waits for
// too, as it waits for the jobs moved off it live that it still holds frozen until they run on
// their target (`migrating_jobs`: a target that cannot restore one hands it back).
Json node_with_allocations(const model::Node& node, const Allocation* allocation, int64_t releasing, int64_t migrating) {
  Json json = to_json(node);
  if (!json.contains("status")) return json;
  json["status"]["bound_jobs"] = allocation ? allocation->jobs.size() : 0;
  if (releasing > 0) json["status"]["releasing_jobs"] = releasing;
  if (migrating > 0) json["status"]["migrating_jobs"] = migrating;
  if (!json["status"].contains("gpus")) return json;
  for (Json& gpu : json["status"]["gpus"]) {
    const int index = gpu.value("index", -1);
    int blocks = 0, jobs = 0;
    int64_t vram = 0;
    if (allocation) {
      for (const auto& [job, held] : allocation->jobs) {
        bool holds = false;
        for (const model::GpuBinding& g : held) {
          if (g.index != index) continue;
          blocks += g.blocks;
          vram += g.vram_mib;
          holds = true;
        }
        jobs += holds;
      }
    }
    gpu["allocated_blocks"] = blocks;
    gpu["allocated_vram_mib"] = vram;
    gpu["allocated_jobs"] = jobs;
  }
  return json;
}

bool same_secret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// A registering node is Ready, unless an earlier registration of its name (an agent reinstalled)
// was cordoned or draining: the operator's decision survives it.
void set_registered_phase(model::Node& node, const store::Record* existing) {
  if (existing) {
    auto old = model::node_from_json(Json::parse(existing->value, nullptr, false));
    if (old && (old->phase == model::NodePhase::kCordoned || old->phase == model::NodePhase::kDraining)) {
      node.phase = old->phase;
      node.unschedulable = true;
      node.drain_requeues = old->drain_requeues;
      return;
    }
  } else {
    node.unschedulable = false;
  }
  node.phase = model::NodePhase::kReady;
  node.drain_requeues = false;
}

}  // namespace

net::Response Api::register_node(const Call& call) {
  auto body = parse_object(call.request.body);
  if (!body) return error_response(body.error());
  if (!body->contains("join_token") || !(*body)["join_token"].is_string()) {
    return error_response(Error::of(ErrorCode::kUnauthenticated, "join_token", "", "a join token is required"));
  }
  if (!body->contains("node") || !(*body)["node"].is_object()) {
    return error_response(Error::invalid_argument("node", "", "expected the node object"));
  }
  std::string token = (*body)["join_token"];
  size_t dot = token.find('.');
  std::string token_id = dot == std::string::npos ? token : token.substr(0, dot);
  std::string secret = dot == std::string::npos ? "" : token.substr(dot + 1);
  auto refuse = [&](const std::string& why) {
    Error e = Error::of(ErrorCode::kUnauthenticated, "join_token", token_id, why);
    audit_refusal(call, "nodes.register", token_id, e);
    return error_response(e);
  };
  const Json& node_body = (*body)["node"];
  // Nodes joining at once with one token each count a use of it: the one whose commit finds the
  // token (or a node of the same name) changed since it read them reads them again, not fails. Each
  // lost commit is another node's join, so the bound is a fleet joining in the same instant.
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto join = ctx_.store.get(kind::kJoinTokens, token_id);
    if (!join || token_id.empty()) return refuse("unknown join token");
    auto jt = model::join_token_from_json(Json::parse(join->value, nullptr, false));
    if (!jt) return refuse("unreadable join token record");
    if (!same_secret(auth::sha256_hex(secret), jt->secret_sha256)) return refuse("wrong join token secret");
    if (jt->revoked) return refuse("join token was revoked");
    if (jt->expires_at <= call.now) return refuse("join token expired at " + format_rfc3339(jt->expires_at));
    if (jt->max_uses && jt->uses >= *jt->max_uses) return refuse("join token was used its maximum number of times");

    auto node = model::node_from_json(node_body);
    if (!node) {
      Error e = node.error();
      e.field = "node." + e.field;
      return error_response(e);
    }
    const std::string name = node->meta.name;
    auto existing = ctx_.store.get(kind::kNodes, name);
    set_registered_phase(*node, existing ? &*existing : nullptr);
    node->last_heartbeat = call.now;
    node->meta.revision = 0;

    model::ApiToken credential;
    credential.meta.name = auth::random_hex(16);
    credential.user = "node:" + name;
    credential.expires_at = call.now + kNodeCredentialTtl;
    credential.created_by = "join-token:" + token_id;
    jt->uses += 1;

    std::vector<store::Op> ops;
    Json node_value = to_json(*node);
    ops.push_back(existing ? store::Op::update(kind::kNodes, name, node_value.dump(), existing->mod_revision)
                           : store::Op::create(kind::kNodes, name, node_value.dump()));
    ops.push_back(store::Op::create(kind::kApiTokens, credential.meta.name, to_json(credential).dump()));
    Json jt_value = to_json(*jt);
    jt_value["metadata"].erase("revision");
    ops.push_back(store::Op::update(kind::kJoinTokens, token_id, jt_value.dump(), join->mod_revision));
    Caller as_node;
    as_node.user = "node:" + name;
    Call audited{call.request, as_node, call.params, call.now};
    auto committed = commit(audited, std::move(ops), "nodes.register", name,
                            {{"gpus", node->gpus.size()}, {"simulated", node->simulated}, {"join_token", token_id}});
    if (!committed) {
      const ErrorCode code = committed.error().code;
      if (code == ErrorCode::kConflict || code == ErrorCode::kAlreadyExists) continue;
      return error_response(committed.error());
    }
    ctx_.wake_scheduler();
    auth::MintRequest mint{"node:" + name, "", credential.meta.name, kNodeCredentialTtl};
    std::string jwt = auth::mint_hs256(mint, ctx_.signing, call.now);
    node->meta.revision = committed->revision;
    return json_response(201, {{"token", jwt}, {"node", node_json(*node)}});
  }
  return error_response(Error::of(ErrorCode::kConflict, "join_token", token_id,
                                  "the token and the node kept changing while this node joined; retry"));
}

net::Response Api::heartbeat(const Call& call) {
  const std::string& name = call.param("name");
  if (call.caller.node != name) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "node", name, "a node's credential heartbeats only for itself"));
  }
  auto body = parse_object(call.request.body);
  if (!body) return error_response(body.error());
  auto reported = model::node_from_json(*body);
  if (!reported) return error_response(reported.error());
  if (reported->meta.name != name) {
    return error_response(Error::invalid_argument("metadata.name", reported->meta.name, "must be " + name));
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto record = ctx_.store.get(kind::kNodes, name);
    if (!record) return error_response(record.error());
    auto current = model::node_from_json(Json::parse(record->value, nullptr, false));
    if (!current) return error_response(current.error());
    model::Node next = *reported;
    // What the operator decided stays; what the agent sees is taken from the report.
    next.phase = current->phase;
    next.unschedulable = current->unschedulable;
    next.drain_requeues = current->drain_requeues;
    if (next.phase == model::NodePhase::kNotReady || next.phase == model::NodePhase::kLost) {
      next.phase = next.unschedulable ? model::NodePhase::kCordoned : model::NodePhase::kReady;
    }
    next.last_heartbeat = call.now;
    // The report names the revision of the record its agent reconciled MIG layouts against; a
    // layout the scheduler decided after that read is not yet seen there, so it stays decided (the
    // agent applies it before its next heartbeat) rather than being reverted to what the GPU had.
    if (reported->meta.revision != 0 && record->mod_revision > reported->meta.revision) {
      keep_decided_layouts(*current, next);
    }
    next.meta.revision = 0;
    Json value = to_json(next);
    bool changed_shape = current->gpus != next.gpus || current->phase != next.phase;
    std::vector<store::Op> ops{store::Op::update(kind::kNodes, name, value.dump(), record->mod_revision)};
    // Heartbeats are frequent: they are audited only when they change what the scheduler sees.
    auto committed = changed_shape ? commit(call, std::move(ops), "nodes.heartbeat", name)
                                   : ctx_.store.txn(std::move(ops));
    if (committed) {
      if (!changed_shape) {
        for (const auto& r : committed->records) ctx_.cache.apply(r);
      } else {
        ctx_.wake_scheduler();
      }
      next.meta.revision = committed->revision;
      return json_response(200, node_json(next));
    }
    if (committed.error().code != ErrorCode::kConflict) return error_response(committed.error());
  }
  return error_response(Error::of(ErrorCode::kConflict, "node", name, "the node kept changing; retry"));
}

net::Response Api::list_nodes(const Call& call) {
  if (call.request.query_value("watch") == "1" || call.request.query_value("watch") == "true") {
    auto selector = store::Selector::parse(call.request.query_value("labelSelector"), call.request.query_value("fieldSelector"));
    if (!selector) return error_response(selector.error());
    auto sel = *selector;
    return watch(call, kind::kNodes, [sel](const Json& node) { return sel.matches(node); });
  }
  Json items = Json::array();
  int64_t revision = ctx_.store.revision();
  ctx_.cache.read([&](const ObjectCache& c) {
    auto owed = releases_owed(c);
    auto moving = migrations_handed_over(c);
    c.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
      items.push_back(node_view(node, c.allocations.get(name).object.get(), owed[name], moving[name]));
    });
    return 0;
  });
  return json_response(200, {{"items", std::move(items)}, {"revision", revision}});
}

Json Api::node_view(const model::Node& node, const Allocation* allocation, int64_t releasing, int64_t migrating) const {
  model::Node served = node;
  const NodeIdle idle = ctx_.node_idle ? ctx_.node_idle(node.meta.name) : NodeIdle{};
  served.idle_since = idle.since;
  served.power_down_candidate = idle.power_down_candidate;
  return node_with_allocations(served, allocation, releasing, migrating);
}

net::Response Api::get_node(const Call& call) {
  auto answer = ctx_.cache.read([&](const ObjectCache& c) -> std::optional<Json> {
    auto node = c.nodes.get(call.param("name"));
    if (!node.object) return std::nullopt;
    const std::string& name = call.param("name");
    return node_view(*node.object, c.allocations.get(name).object.get(), releases_owed(c)[name],
                     migrations_handed_over(c)[name]);
  });
  if (!answer) return error_response(Error::not_found("node", call.param("name"), "no such node"));
  return json_response(200, std::move(*answer));
}

net::Response Api::cordon_node(const Call& call) { return set_node_schedulable(call, true, false); }
net::Response Api::uncordon_node(const Call& call) { return set_node_schedulable(call, false, false); }
net::Response Api::drain_node(const Call& call) { return set_node_schedulable(call, true, true); }

net::Response Api::set_node_schedulable(const Call& call, bool cordon, bool drain) {
  const std::string& name = call.param("name");
  std::string action = drain ? "nodes.drain" : cordon ? "nodes.cordon" : "nodes.uncordon";
  if (!call.caller.admin()) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "node", name, "only cluster admins cordon, drain or uncordon nodes");
    audit_refusal(call, action, name, denied);
    return error_response(denied);
  }
  // A drain may requeue what cannot move live: {"requeue": true}. No other call takes a body.
  bool requeue = false;
  if (!call.request.body.empty()) {
    auto body = parse_object(call.request.body);
    if (!body) return error_response(body.error());
    if (!drain && !body->empty()) {
      return error_response(Error::invalid_argument(body->begin().key(), body->begin()->dump(),
                                                    "cordon and uncordon take no body"));
    }
    JsonReader r(*body, "");
    r.only({"requeue"});
    requeue = r.boolean_or("requeue", false);
    if (!r.status()) return error_response(r.status().error());
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto record = ctx_.store.get(kind::kNodes, name);
    if (!record) return error_response(record.error());
    auto node = model::node_from_json(Json::parse(record->value, nullptr, false));
    if (!node) return error_response(node.error());
    node->unschedulable = cordon;
    node->drain_requeues = drain && requeue;
    bool silent = node->phase == model::NodePhase::kNotReady || node->phase == model::NodePhase::kLost;
    if (!silent) {
      node->phase = drain ? model::NodePhase::kDraining : cordon ? model::NodePhase::kCordoned : model::NodePhase::kReady;
    }
    node->meta.revision = 0;
    auto committed = commit(call, {store::Op::update(kind::kNodes, name, to_json(*node).dump(), record->mod_revision)},
                            action, name);
    if (committed) {
      ctx_.wake_scheduler();
      node->meta.revision = committed->revision;
      return json_response(200, node_json(*node));
    }
    if (committed.error().code != ErrorCode::kConflict) return error_response(committed.error());
  }
  return error_response(Error::of(ErrorCode::kConflict, "node", name, "the node kept changing; retry"));
}

}  // namespace cnlab::server
