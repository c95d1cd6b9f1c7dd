// Jobs: submit (admission, quotas, idempotency), read, list and watch, cancel, events, the agent's
// status reports, and logs.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/strings.h"
#include "model/workspace.h"
#include "server/api.h"
#include "server/api_error.h"
#include "server/job_writes.h"
#include "server/migrations.h"

namespace cnlab::server {
namespace {

constexpr size_t kMaxIdempotencyKey = 256;
constexpr size_t kMaxListLimit = 5000;



model::JobEvent event(model::JobEventType type, Time at, std::string reason) { return {type, at, std::move(reason)}; }

// The scheduler's view of a pending job, merged into its status as served.
void add_waiting(Json& status, const JobWaiting& waiting) {
  if (!waiting.reason.empty()) status["waiting_reason"] = waiting.reason;
  if (waiting.queue_position > 0) status["queue_position"] = waiting.queue_position;
  if (waiting.estimated_start) status["estimated_start"] = format_rfc3339(*waiting.estimated_start);
}

// GET /v1/jobs?view=summary: what `cnlab ps` shows of each job, written straight from the cache's
// typed jobs (no stored JSON is parsed). The full view costs ~1 KB and a parse per job; this one
// ~200 bytes and no parse, so 10,000 jobs take a few milliseconds.
constexpr std::string_view kSummaryFields = "spec.user, spec.project and status.phase (= or !=)";

void append_string(std::string& out, std::string_view text) {
  out += '"';
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  out += '"';
}

struct SummaryFilter {
  std::vector<store::Selector::Term> fields;  // only on kSummaryFields
  std::vector<store::Selector::Term> labels;
};

// The selector terms the summary view can answer from a typed job; anything else is a 400 that
// names the term and what is allowed.
Result<SummaryFilter> summary_filter(const net::Request& req) {
  auto selector = store::Selector::parse(req.query_value("labelSelector"), req.query_value("fieldSelector"));
  if (!selector) return selector.error();
  SummaryFilter filter{selector->fields, selector->labels};
  for (const auto& term : filter.fields) {
    bool known = term.path == "spec.user" || term.path == "spec.project" || term.path == "status.phase";
    if (!known || term.op == store::Selector::Term::Op::kExists) {
      return Error::invalid_argument("fieldSelector", term.path,
                                     fmt::format("view=summary selects only on {}", kSummaryFields));
    }
  }
  return filter;
}

bool matches(const SummaryFilter& filter, const model::Job& job) {
  using Op = store::Selector::Term::Op;
  for (const auto& term : filter.fields) {
    std::string_view value = term.path == "spec.user"      ? std::string_view(job.spec.user)
                             : term.path == "spec.project" ? std::string_view(job.spec.project)
                                                           : model::to_string(job.status.phase);
    if ((value == term.value) != (term.op == Op::kEq)) return false;
  }
  const auto& labels = job.meta.labels;
  for (const auto& term : filter.labels) {
    auto it = labels.find(term.path);
    bool ok = term.op == Op::kExists ? it != labels.end()
              : term.op == Op::kEq   ? it != labels.end() && it->second == term.value
                                     : it == labels.end() || it->second != term.value;
    if (!ok) return false;
  }
  return true;
}

void append_summary(std::string& out, const model::Job& job, const JobWaiting* waiting) {
  const model::JobStatus& s = job.status;
  out += "{\"name\":";
  append_string(out, job.meta.name);
  out += ",\"project\":";
  append_string(out, job.spec.project);
  out += ",\"user\":";
  append_string(out, job.spec.user);
  out += ",\"gpu\":";
  append_string(out, model::to_string(job.spec.gpu));
  out += ",\"priority_class\":";
  append_string(out, job.spec.priority_class);
  out += ",\"phase\":";
  append_string(out, model::to_string(s.phase));
  out += ",\"nodes\":[";
  for (size_t i = 0; i < s.placement.size(); ++i) {
    if (i) out += ',';
    append_string(out, s.placement[i].node);
  }
  out += "],\"submitted_at\":\"";
  out += format_rfc3339(s.submitted_at);
  out += '"';
  if (s.started_at) out += ",\"started_at\":\"" + format_rfc3339(*s.started_at) + '"';
  if (s.finished_at) out += ",\"finished_at\":\"" + format_rfc3339(*s.finished_at) + '"';
  if (s.exit_code) out += fmt::format(",\"exit_code\":{}", *s.exit_code);
  if (s.signal) out += fmt::format(",\"signal\":{}", *s.signal);
  if (waiting && waiting->queue_position > 0) out += fmt::format(",\"queue_position\":{}", waiting->queue_position);
  if (s.migration) {  // a move under way: to this node ("" for any with room)
    out += ",\"moving_to\":";
    append_string(out, s.migration->to);
  }
  if (s.cancel_requested && !model::is_terminal(s.phase)) out += ",\"cancelling\":true";
  out += '}';
}

}  // namespace

Result<Json> parse_body(const net::Request& request) {
  Json body = Json::parse(request.body, nullptr, false);
  if (body.is_discarded()) {
    return Error::invalid_argument("body", request.body.substr(0, 64), "not valid JSON");
  }
  if (!body.is_object()) return Error::invalid_argument("body", body.dump().substr(0, 64), "expected a JSON object");
  return body;
}

Result<Json> parse_optional_body(const net::Request& request) {
  return request.body.empty() ? Result<Json>(Json::object()) : parse_body(request);
}

net::Response Api::list_job_summaries(const Call& call, const std::string& project, const std::string& node) {
  const net::Request& req = call.request;
  for (const char* unsupported : {"watch", "limit", "continue"}) {
    if (!req.query_value(unsupported).empty()) {
      return error_response(Error::invalid_argument(unsupported, req.query_value(unsupported),
                                                    "view=summary lists are whole and do not watch; use the full view"));
    }
  }
  auto filter = summary_filter(req);
  if (!filter) return error_response(filter.error());
  using Op = store::Selector::Term::Op;
  if (!project.empty()) filter->fields.push_back({"spec.project", project, Op::kEq});
  if (!req.query_value("phase").empty()) filter->fields.push_back({"status.phase", req.query_value("phase"), Op::kEq});
  const Caller& caller = call.caller;
  // Read before the cache: a watch from this revision may replay a change the list already shows,
  // never miss one.
  int64_t revision = ctx_.cache.watched_revision();
  std::string body = "{\"items\":[";
  size_t count = 0;
  ctx_.cache.read([&](const ObjectCache& c) {
    const std::string* seen_project = nullptr;  // the last project `sees` answered yes for
    auto summarise = [&](const std::string&, const model::Job& job) {
      if (!caller.is_node() && !(seen_project && *seen_project == job.spec.project)) {
        if (!caller.sees(job.spec.project)) return;
        seen_project = &job.spec.project;
      }
      if (!matches(*filter, job)) return;
      if (count++) body += ',';
      JobWaiting waiting;
      if (job.status.phase == model::JobPhase::kPending) waiting = ctx_.waiting(job.meta.name);
      append_summary(body, job, &waiting);
    };
    if (!node.empty()) {
      if (auto on = c.jobs_by_node.find(node); on != c.jobs_by_node.end()) c.for_each_job_in(on->second, summarise);
      return 0;
    }
    body.reserve(body.size() + c.jobs.size() * 240);
    c.jobs.for_each([&](const std::string& id, const model::Job& job, int64_t) { summarise(id, job); });
    return 0;
  });
  body += fmt::format("],\"revision\":{}}}\n", revision);
  net::Response response;
  response.body = std::move(body);
  return response;
}

Json Api::node_jobs(const std::string& node, const store::Selector& selector,
                   const std::function<bool(const Json&)>& visible) const {
  // Read before the cache, as for summaries: a watch from this revision may replay a change the
  // list already shows, never miss one.
  int64_t revision = ctx_.cache.watched_revision();
  Json items = Json::array();
  ctx_.cache.read([&](const ObjectCache& c) {
    auto on = c.jobs_by_node.find(node);
    if (on == c.jobs_by_node.end()) return 0;
    c.for_each_job_in(on->second, [&](const std::string&, const model::Job& job) {
      Json served = job_json(job);
      if (selector.matches(served) && visible(served)) items.push_back(std::move(served));
    });
    return 0;
  });
  return {{"items", std::move(items)}, {"revision", revision}};
}

Json Api::job_json(const model::Job& job) const {
  Json out = to_json(job);
  if (job.status.phase == model::JobPhase::kPending) add_waiting(out["status"], ctx_.waiting(job.meta.name));
  return out;
}

Result<Cached<model::Job>> Api::visible_job(const Call& call, const std::string& id, bool incoming) {
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  // A node sees the jobs bound to it, and one it is migrating away (it holds the frozen copy
  // until the target has taken over, or the job comes back to it).
  auto migrating = [&](const model::Job& job) {
    return job.status.migration && (job.status.migration->from == call.caller.node ||
                                    (incoming && job.status.migration->to == call.caller.node));
  };
  bool visible = cached.object && (call.caller.is_node()
                                       ? model::bound_to(*cached.object, call.caller.node) || migrating(*cached.object)
                                       : call.caller.sees(cached.object->spec.project));
  if (!visible) return Error::not_found("job", id, "no such job");
  return cached;
}

net::Response Api::submit_job(const Call& call) {
  const Caller& caller = call.caller;
  if (caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", caller.user, "nodes do not submit jobs"));
  }
  auto parsed = parse_body(call.request);
  if (!parsed) return error_response(parsed.error());
  Json body = std::move(*parsed);
  if (body.contains("status")) {
    return error_response(Error::invalid_argument("status", body["status"].dump().substr(0, 64), "the server sets a job's status"));
  }
  if (!body.contains("metadata")) body["metadata"] = Json::object();
  if (!body["metadata"].is_object()) return error_response(Error::invalid_argument("metadata", body["metadata"].dump(), "expected an object"));
  if (!body.contains("spec") || !body["spec"].is_object()) {
    return error_response(Error::invalid_argument("spec", body.value("spec", Json()).dump(), "a job needs a spec object"));
  }
  Json& meta = body["metadata"];
  Json& spec = body["spec"];

  // The id is the requested name (or "job") plus a random suffix, like Kubernetes' generateName:
  // ids cannot collide across projects, and nothing about other projects' jobs can be learnt.
  std::string requested = meta.contains("name") && meta["name"].is_string() ? meta["name"].get<std::string>() : "job";
  if (auto valid = model::validate_name(requested, "metadata.name"); !valid) return error_response(valid.error());
  if (requested.size() > 54) requested.resize(54);
  while (!requested.empty() && (requested.back() == '-' || requested.back() == '.')) requested.pop_back();
  std::string id = requested + "-" + auth::random_hex(4);
  meta["name"] = id;
  if (meta.contains("name") && requested != "job") meta["labels"]["cnlab.io/name"] = requested;

  if (!spec.contains("project")) {
    if (caller.default_project.empty()) {
      return error_response(Error::invalid_argument("spec.project", "", "required: the token names no default project"));
    }
    spec["project"] = caller.default_project;
  }
  if (spec.contains("user") && spec["user"] != caller.user) {
    std::string given = spec["user"].is_string() ? spec["user"].get<std::string>() : spec["user"].dump();
    return error_response(Error::invalid_argument("spec.user", given, "a job runs as the user who submits it"));
  }
  spec["user"] = caller.user;
  auto decoded = model::job_from_json(body);
  if (!decoded) return error_response(decoded.error());
  model::Job job = std::move(*decoded);
  if (!caller.can(job.spec.project, auth::Action::kSubmit)) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "spec.project", job.spec.project,
                             "you have no role in this project that may submit jobs");
    audit_refusal(call, "jobs.create", job.spec.project, denied);
    return error_response(denied);
  }

  // Idempotency: the same key from the same user returns the job the first request made.
  std::string idem = call.request.header("idempotency-key");
  std::string idem_key, request_digest;
  if (!idem.empty()) {
    if (idem.size() > kMaxIdempotencyKey) {
      return error_response(Error::of(ErrorCode::kTooLarge, "Idempotency-Key", idem.substr(0, 32) + "...",
                                      "at most 256 bytes"));
    }
    idem_key = caller.user + "/" + auth::sha256_hex(idem).substr(0, 40);
    request_digest = auth::sha256_hex(call.request.body);
  }
  auto replay = [&]() -> std::optional<net::Response> {
    if (idem_key.empty()) return std::nullopt;
    auto record = ctx_.store.get(kind::kIdempotency, idem_key);
    if (!record) return std::nullopt;
    Json stored = Json::parse(record->value, nullptr, false);
    if (stored.value("request", "") != request_digest) {
      return error_response(Error::of(ErrorCode::kFailedPrecondition, "Idempotency-Key", idem,
                                      "this key was used for a different request"));
    }
    auto existing = ctx_.store.get(kind::kJobs, stored.value("job", ""));
    if (!existing) return error_response(existing.error());
    auto previous = model::job_from_json(Json::parse(existing->value, nullptr, false));
    if (!previous) return error_response(previous.error());
    previous->meta.revision = existing->mod_revision;
    net::Response response = json_response(200, job_json(*previous));
    response.headers.emplace_back("Idempotent-Replayed", "true");
    return response;
  };
  if (auto replayed = replay()) return *replayed;

  // Admission: what can never run here, then quotas. The workspace is read from the store first,
  // outside the cache's lock.
  std::optional<model::Workspace> workspace;
  if (job.spec.workspace) {
    auto stored = stored_workspace(model::workspace_name(job.spec.workspace->digest));
    if (!stored && stored.error().code != ErrorCode::kNotFound) return error_response(stored.error());
    if (stored && may_use_workspace(caller, job.spec.project, *stored)) workspace = std::move(*stored);
  }
  std::vector<model::Quota> quotas;
  Status admissible = ctx_.cache.read([&](const ObjectCache& c) {
    c.quotas.for_each([&](const std::string&, const model::Quota& q, int64_t) {
      if (q.project == job.spec.project) quotas.push_back(q);
    });
    return check_admissible(job, c, ctx_.config.policy, call.now, workspace ? &*workspace : nullptr);
  });
  auto refuse = [&](const Error& error, const std::string& reason) {
    ctx_.metrics.admission_rejections.inc({{"reason", reason}});
    audit_refusal(call, "jobs.create", job.spec.project + "/" + id, error);
    return error_response(error);
  };
  if (!admissible) {
    const Error& e = admissible.error();
    std::string reason = e.code == ErrorCode::kNotFound ? "unknown_project"
                         : e.field == "spec.deadline"  ? "deadline"
                         : e.field == "spec.workspace.digest" ? "workspace"
                         : e.code == ErrorCode::kInvalidArgument ? "invalid"
                                                                 : "never_fits";
    return refuse(e, reason);
  }
  auto admitted = ctx_.quotas.admit(id, job, quotas, call.now);
  if (!admitted) return refuse(admitted.error(), "quota");

  std::string queued_reason = "admitted";
  if (admitted->borrowing) {
    job.spec.priority_class = "opportunistic";
    queued_reason = admitted->note;
  }
  job.meta.uid = auth::random_hex(16);
  job.status = {};
  job.status.phase = model::JobPhase::kPending;
  job.status.submitted_at = call.now;
  job.status.events.push_back(event(model::JobEventType::kQueued, call.now, queued_reason));
  job.status.waiting_reason = "waiting for the next scheduling cycle";

  std::vector<store::Op> ops;
  ops.push_back(store::Op::create(kind::kJobs, id, to_json(job).dump()));
  if (!idem_key.empty()) {
    Json record = {{"job", id}, {"request", request_digest}, {"time", format_rfc3339(call.now)}};
    ops.push_back(store::Op::create(kind::kIdempotency, idem_key, record.dump()));
  }
  Json detail = {{"gpu", to_string(job.spec.gpu)}, {"class", job.spec.priority_class}};
  if (admitted->borrowing) detail["borrowing"] = true;
  auto committed = commit(call, ops, "jobs.create", job.spec.project + "/" + id, detail);
  // Ids carry 32 random bits: in a store of many jobs a new one can meet an old one. Draw again.
  for (int draw = 0; draw < 4 && !committed && committed.error().code == ErrorCode::kAlreadyExists &&
                     committed.error().field == kind::kJobs;
       ++draw) {
    ctx_.quotas.release(id);
    id = requested + "-" + auth::random_hex(4);
    job.meta.name = id;
    if (auto again = ctx_.quotas.admit(id, job, quotas, call.now); !again) return refuse(again.error(), "quota");
    ops[0] = store::Op::create(kind::kJobs, id, to_json(job).dump());
    if (ops.size() > 1) ops[1].value = Json{{"job", id}, {"request", request_digest}, {"time", format_rfc3339(call.now)}}.dump();
    committed = commit(call, ops, "jobs.create", job.spec.project + "/" + id, detail);
  }
  if (!committed) {
    ctx_.quotas.release(id);
    if (committed.error().code == ErrorCode::kAlreadyExists && !idem_key.empty()) {
      if (auto replayed = replay()) return *replayed;  // a concurrent submit with the same key won
    }
    return error_response(committed.error());
  }
  ctx_.wake_scheduler();
  job.meta.revision = committed->revision;
  return json_response(201, job_json(job));
}

net::Response Api::list_jobs(const Call& call) {
  const net::Request& req = call.request;
  std::string project = req.query_value("project");
  std::string node = req.query_value("node");
  if (call.caller.is_node() && node.empty()) node = call.caller.node;
  if (call.caller.is_node() && node != call.caller.node) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "node", node, "a node sees only its own jobs"));
  }
  if (!project.empty() && !call.caller.is_node() && !call.caller.sees(project)) {
    return error_response(Error::not_found("project", project, "no such project"));
  }
  std::string view = req.query_value("view");
  if (view == "summary") return list_job_summaries(call, project, node);
  if (!view.empty() && view != "full") {
    return error_response(Error::invalid_argument("view", view, "expected full (the default) or summary"));
  }
  // A caller who sees only some projects pages through one project at a time: a page cut from
  // everyone's jobs would end on (and its continue token name) a job they may not see.
  if (project.empty() && !call.caller.is_node() && !call.caller.admin()) {
    std::vector<std::string> seen;
    for (const auto& [p, role] : call.caller.bindings.by_project) {
      if (p != "*") seen.push_back(p);
    }
    if (seen.size() == 1) {
      project = seen.front();
    } else if (!req.query_value("limit").empty() || !req.query_value("continue").empty()) {
      return error_response(Error::invalid_argument("project", "", "paging (limit, continue) needs ?project= when you see more than one project"));
    }
  }
  if (call.caller.is_node() && (!req.query_value("limit").empty() || !req.query_value("continue").empty())) {
    return error_response(Error::invalid_argument("limit", req.query_value("limit"), "a node lists its jobs whole"));
  }
  std::string fields = req.query_value("fieldSelector");
  if (!project.empty()) fields += (fields.empty() ? "" : ",") + std::string("spec.project=") + project;
  if (!req.query_value("phase").empty()) fields += (fields.empty() ? "" : ",") + std::string("status.phase=") + req.query_value("phase");
  auto selector = store::Selector::parse(req.query_value("labelSelector"), fields);
  if (!selector) return error_response(selector.error());
  const Caller& caller = call.caller;
  auto visible = [caller, node](const Json& job) {
    if (!node.empty()) {
      // Runs once per watcher and event: compare in place, copy nothing.
      bool here = false;
      const Json& status = job["status"];
      auto placement = status.find("placement");
      if (placement != status.end() && placement->is_array()) {
        for (const auto& b : *placement) {
          auto name = b.find("node");
          here = here || (name != b.end() && name->is_string() && name->get_ref<const std::string&>() == node);
        }
      }
      if (!here) return false;
    }
    if (caller.is_node()) return true;
    return caller.sees(job["spec"].value("project", ""));
  };
  if (req.query_value("watch") == "1" || req.query_value("watch") == "true") {
    auto sel = *selector;
    std::vector<std::string> now_on_node;
    if (!node.empty()) {
      ctx_.cache.read([&](const ObjectCache& c) {
        if (auto on = c.jobs_by_node.find(node); on != c.jobs_by_node.end()) {
          for (const auto& [id, job] : on->second) now_on_node.push_back(id);
        }
        return 0;
      });
    }
    // A node's agent must hear when a job leaves it (pre-empted, requeued off a lost node).
    return watch(call, kind::kJobs, [sel, visible](const Json& job) { return sel.matches(job) && visible(job); },
                 node, !node.empty(), std::move(now_on_node));
  }
  if (!node.empty() && req.query_value("limit").empty() && req.query_value("continue").empty()) {
    return json_response(200, node_jobs(node, *selector, visible));
  }
  store::ListOptions options;
  options.selector = *selector;
  options.continue_token = req.query_value("continue");
  std::string limit = req.query_value("limit");
  if (!limit.empty()) {
    char* end = nullptr;
    long long n = std::strtoll(limit.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > static_cast<long long>(kMaxListLimit)) {
      return error_response(Error::invalid_argument("limit", limit, "expected 1..5000"));
    }
    options.limit = n;
  }
  auto listed = ctx_.store.list(kind::kJobs, options);
  if (!listed) return error_response(listed.error());
  Json items = Json::array();
  for (const auto& record : listed->items) {
    Json job = Json::parse(record.value, nullptr, false);
    if (!job.is_object() || !visible(job)) continue;
    job["metadata"]["revision"] = record.mod_revision;
    if (job["status"].value("phase", "") == "Pending") add_waiting(job["status"], ctx_.waiting(record.key));
    items.push_back(std::move(job));
  }
  Json out = {{"items", std::move(items)}, {"revision", listed->revision}};
  if (!listed->continue_token.empty()) out["continue"] = listed->continue_token;
  return json_response(200, out);
}

net::Response Api::get_job(const Call& call) {
  auto job = visible_job(call, call.param("id"), /*incoming=*/true);
  if (!job) return error_response(job.error());
  return json_response(200, job_json(*job->object));
}

net::Response Api::job_events(const Call& call) {
  auto job = visible_job(call, call.param("id"));
  if (!job) return error_response(job.error());
  Json events = Json::array();
  for (const auto& e : job->object->status.events) events.push_back(model::to_json(e));
  Json served = job_json(*job->object);
  return json_response(200, {{"job", call.param("id")}, {"events", std::move(events)},
                             {"waiting_reason", served["status"].value("waiting_reason", "")}});
}

net::Response Api::cancel_job(const Call& call) {
  const std::string& id = call.param("id");
  auto cached = visible_job(call, id);
  if (!cached || call.caller.is_node()) return error_response(Error::not_found("job", id, "no such job"));
  const model::Job& seen = *cached->object;
  bool allowed = call.caller.can(seen.spec.project, auth::Action::kCancelAny) ||
                 (seen.spec.user == call.caller.user && call.caller.can(seen.spec.project, auth::Action::kCancelOwn));
  std::string target = seen.spec.project + "/" + id;
  if (!allowed) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "job", id, "your role may cancel only your own jobs");
    audit_refusal(call, "jobs.cancel", target, denied);
    return error_response(denied);
  }
  std::string reason = "cancelled by " + call.caller.user;
  Json audit = audit_record(call, "jobs.cancel", target, "ok", Json::object());
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        if (is_terminal(job.status.phase)) {
          return Error::of(ErrorCode::kConflict, "job", id, "already " + std::string(to_string(job.status.phase)));
        }
        if (job.status.phase == model::JobPhase::kPending) {
          job.status.phase = model::JobPhase::kCancelled;
          job.status.finished_at = call.now;
          job.status.waiting_reason.clear();
          job.status.awaiting_release.reset();
          job.status.events.push_back(event(model::JobEventType::kCancelled, call.now, reason));
        } else {
          // Its agent stops the process and reports the end; the GPUs are freed then.
          if (job.status.cancel_requested) return false;
          job.status.cancel_requested = true;
          job.status.events.push_back(event(model::JobEventType::kCancelled, call.now, reason + "; stopping"));
        }
        return true;
      },
      audit.dump());
  if (!updated) return error_response(updated.error());
  ctx_.wake_scheduler();
  auto now_cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  return json_response(200, job_json(*now_cached.object));
}

net::Response Api::report_job_status(const Call& call) {
  const std::string& id = call.param("id");
  if (!call.caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", call.caller.user,
                                    "only the agent of the job's node reports its status"));
  }
  auto cached = visible_job(call, id);
  if (!cached) return error_response(cached.error());
  auto body = parse_body(call.request);
  if (!body) return error_response(body.error());
  JsonReader r(*body, "");
  r.only({"phase", "exit_code", "signal", "message", "checkpoint_at", "gpu_active_at", "memory_used_mib", "memory_event",
          "move_requested", "holding_mib", "migration_failed", "migration_handed_over", "migration_progress", "requeue", "checkpoint_failed"});
  std::string phase = r.string("phase");
  int64_t exit_code = r.integer_or("exit_code", -1, -1, 255);
  int64_t signal = r.integer_or("signal", 0, 0, 127);
  std::string message = r.string_or("message", "");
  auto checkpoint_at = r.time("checkpoint_at");
  // The vGPU side of a running job (Running reports only): when its processes last used the GPU,
  // a change the agent made to its VRAM limit, and a request to move it off a GPU short of memory.
  auto gpu_active_at = r.time("gpu_active_at");
  // The host memory its processes hold now, as the agent measured it (what a dump would copy).
  const int64_t memory_used_mib = r.integer_or("memory_used_mib", -1, 0, model::kMaxMemoryUsedMib);
  std::string memory_event = r.string_or("memory_event", "");
  std::string move_requested = r.string_or("move_requested", "");
  // With a move request: what the job holds on each of its GPUs (MiB, in its binding's order).
  std::vector<int64_t> holding_mib;
  if (const Json* given = r.array("holding_mib")) {
    for (size_t i = 0; i < given->size(); ++i) {
      const Json& mib = (*given)[i];
      if (!mib.is_number_integer() || mib.get<int64_t>() < 0) {
        r.fail(Error::invalid_argument(r.path_of("holding_mib") + "[" + std::to_string(i) + "]", mib.dump(),
                                       "a whole number of MiB, 0 or more"));
        break;
      }
      holding_mib.push_back(mib.get<int64_t>());
    }
    if (move_requested.empty()) r.fail(Error::invalid_argument(r.path_of("holding_mib"), given->dump(), "only with move_requested"));
  }
  // The run was lost through no fault of the job (a post-copy move whose source died before all of
  // its memory arrived): back to the queue, as for a lost node, rather than Failed.
  const bool run_lost = r.boolean_or("requeue", false);
  // The source could not dump it for a migration asked for (it runs on there).
  std::string migration_failed = r.string_or("migration_failed", "");
  // The source is still dumping, packing or sending it ("packing 3.2 GiB"): the migration's timeout
  // counts from now.
  std::string migration_progress = r.string_or("migration_progress", "");
  if (migration_progress.size() > 200) {
    r.fail(Error::invalid_argument(r.path_of("migration_progress"), migration_progress.substr(0, 40) + "...",
                                   "at most 200 bytes"));
  }
  // A checkpoint asked for (cnlab checkpoint, or periodic) was not taken, and why: the job runs on.
  std::string checkpoint_failed = r.string_or("checkpoint_failed", "");
  if (checkpoint_failed.size() > 1000) {
    r.fail(Error::invalid_argument(r.path_of("checkpoint_failed"), checkpoint_failed.substr(0, 40) + "...",
                                   "at most 1000 bytes"));
  }
  // The source streamed its dump to the target's peer endpoint, which holds it (the job stays
  // frozen on the source): bind the job to the target, which restores it.
  std::optional<model::Migration> handed_over;
  if (const Json* given = r.object("migration_handed_over")) {
    JsonReader h(*given, r.path_of("migration_handed_over"));
    h.only({"dump_digest", "frozen_at_ms", "pages_from"});
    model::Migration move;
    move.dump_digest = h.string("dump_digest");
    move.frozen_at_ms = h.integer_or("frozen_at_ms", 0, 0, INT64_MAX);
    move.pages_from = h.string_or("pages_from", "");
    if (h.status()) {
      if (auto valid = model::validate_digest(move.dump_digest, h.path_of("dump_digest")); !valid) h.fail(valid.error());
    }
    if (h.status() && !move.pages_from.empty()) {
      if (auto parsed = parse_host_port(move.pages_from, h.path_of("pages_from")); !parsed) h.fail(parsed.error());
    }
    if (!h.status()) r.fail(h.status().error());
    handed_over = std::move(move);
  }
  if (!r.status()) return error_response(r.status().error());
  if ((gpu_active_at || memory_used_mib >= 0 || !memory_event.empty() || !move_requested.empty() ||
       !checkpoint_failed.empty()) &&
      phase != "Running") {
    return error_response(Error::invalid_argument(
        "phase", phase,
        "gpu_active_at, memory_used_mib, memory_event, move_requested and checkpoint_failed come with Running"));
  }
  if (!holding_mib.empty()) {
    const auto& placement = cached->object->status.placement;
    const size_t gpus = placement.size() == 1 ? placement.front().gpus.size() : 0;
    if (holding_mib.size() != gpus) {
      return error_response(Error::invalid_argument("holding_mib", std::to_string(holding_mib.size()) + " entries",
                                                    fmt::format("one per GPU of the job's binding ({})", gpus)));
    }
  }
  if (run_lost && phase != "Failed") {
    return error_response(Error::invalid_argument("phase", phase, "requeue comes with Failed"));
  }
  static const std::map<std::string, model::JobPhase> kReportable = {{"Running", model::JobPhase::kRunning},
                                                                      {"Succeeded", model::JobPhase::kSucceeded},
                                                                      {"Failed", model::JobPhase::kFailed}};
  auto to = kReportable.find(phase);
  if (to == kReportable.end()) {
    return error_response(Error::invalid_argument("phase", phase, "an agent reports Running, Succeeded or Failed"));
  }
  Json detail = {{"phase", phase}};
  if (!memory_event.empty()) detail["memory_event"] = memory_event;
  if (!move_requested.empty()) detail["move_requested"] = move_requested;
  if (run_lost) detail["requeue"] = true;
  if (!checkpoint_failed.empty()) detail["checkpoint_failed"] = checkpoint_failed;
  Json audit = audit_record(call, "jobs.status", id, "ok", detail);
  // A GPU short of memory: the job named moves live to the node with the most room for it (its GPU
  // state and vGPU tenant region go with its dump), where it can; else it goes back to the queue.
  // Chosen and recorded with no scheduler cycle in between, which could spend that room.
  std::unique_lock<std::mutex> no_cycle;
  std::optional<MigrationTarget> move_to;
  if (!move_requested.empty()) {
    no_cycle = ctx_.hold_scheduler();
    move_to = ctx_.cache.read([&](const ObjectCache& c) -> std::optional<MigrationTarget> {
      auto from = c.nodes.get(call.caller.node);
      if (!from.object || !migration_refusal(*cached->object, from.object.get()).empty()) return std::nullopt;
      // Where all it holds fits, if anywhere; else where its quota does (that node's controller
      // then takes back or moves as on any node).
      auto target = roomiest_migration_target_holding(c, *cached->object, *from.object, free_room(c), holding_mib);
      // A MIG instance to be made on the target first: only `cnlab migrate` makes one.
      if (!target || !target->gpus.new_instances.empty()) return std::nullopt;
      return *target;
    });
  }
  std::optional<double> start_latency;
  std::pair<std::string, std::string> move_ended;  // a move that ended: its outcome and, migrated, its mode
  int64_t move_pause_ms = 0;
  bool not_taken = false;  // a CheckpointFailed event written
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        move_ended = {};  // this try's, not an earlier one's that lost a race
        not_taken = false;
        if (!holds_gpus(job.status.phase) || !model::bound_to(job, call.caller.node)) {
          return Error::of(ErrorCode::kConflict, "job", id,
                           "the job is " + std::string(to_string(job.status.phase)) + ", not bound to this node");
        }
        if (checkpoint_at) {
          job.status.last_checkpoint_at = *checkpoint_at;
          job.status.events.push_back(event(model::JobEventType::kCheckpointed, call.now, message));
        }
        // A measurement is no start: one that reaches a job bound here again before its old copy
        // stopped (requeued meanwhile) changes nothing.
        if (memory_used_mib >= 0 && job.status.phase != model::JobPhase::kRunning) return checkpoint_at.has_value();
        const bool migration_target = job.status.migration && !job.status.migration->from.empty() &&
                                      job.status.phase == model::JobPhase::kScheduled;
        if (migration_target && to->second != model::JobPhase::kRunning) {
          // The target could not restore it: the source, still holding it frozen, thaws it.
          roll_back_migration(job, call.now, "node " + call.caller.node + " could not restore it: " + message);
          move_ended = {"given_up", ""};
          return true;
        }
        if (run_lost) {
          requeue(job, call.now, "its run on node " + call.caller.node + " was lost: " + message);
          return true;
        }
        if (!migration_failed.empty() && job.status.migration && job.status.migration->from.empty()) {
          job.status.migration.reset();
          move_ended = {"given_up", ""};
          job.status.events.push_back(event(model::JobEventType::kMigrationFailed, call.now,
                                            "node " + call.caller.node + " could not hand it over: " + migration_failed +
                                                "; it carries on on " + call.caller.node));
          return true;
        }
        if (!migration_progress.empty()) {
          // From the source while it dumps and sends (Running, no hand-over yet), or from the
          // target while it restores (Scheduled there after the hand-over).
          const bool source = job.status.migration && job.status.migration->from.empty() &&
                              job.status.phase == model::JobPhase::kRunning;
          if (!source && !migration_target) {
            return Error::of(ErrorCode::kConflict, "job", id, "no migration of the job to or from " + call.caller.node +
                                                                  " is under way");
          }
          job.status.migration->progress_at = call.now;
          job.status.migration->progress = migration_progress;
          return true;
        }
        if (handed_over) {
          if (!job.status.migration || !job.status.migration->from.empty()) {
            return Error::of(ErrorCode::kConflict, "job", id, "no migration of the job from " + call.caller.node + " is under way");
          }
          bind_to_migration_target(job, call.caller.node, handed_over->frozen_at_ms, call.now);
          job.status.migration->pages_from = handed_over->pages_from;
          job.status.migration->dump_digest = handed_over->dump_digest;
          return true;
        }
        if (to->second == model::JobPhase::kRunning && job.status.phase == model::JobPhase::kRunning) {
          bool changed = checkpoint_at.has_value();
          if (gpu_active_at && (!job.status.gpu_active_at || *gpu_active_at > *job.status.gpu_active_at)) {
            job.status.gpu_active_at = std::min(*gpu_active_at, call.now);  // never in the future
            changed = true;
          }
          if (memory_used_mib >= 0 && memory_used_mib != job.status.memory_used_mib) {
            job.status.memory_used_mib = memory_used_mib;
            changed = true;
          }
          if (!memory_event.empty()) {
            job.status.events.push_back(event(model::JobEventType::kMemoryBurst, call.now, memory_event));
            changed = true;
          }
          if (!checkpoint_failed.empty()) {
            job.status.events.push_back(event(model::JobEventType::kCheckpointFailed, call.now,
                                              "not taken on " + call.caller.node + ": " + checkpoint_failed));
            not_taken = true;
            changed = true;
          }
          if (!move_requested.empty()) {
            job.status.events.push_back(event(model::JobEventType::kMoveRequested, call.now, move_requested));
            if (job.status.migration) {
              // Already moving (asked again while its dump is under way): that frees the memory.
            } else if (move_to && migration_refusal(job, nullptr).empty()) {
              ask_to_migrate(job, *move_to, call.now, "to free GPU memory on " + call.caller.node);
            } else {
              // Pre-empted back to the queue (a checkpointable job resumes from its latest
              // checkpoint), which frees the memory the others need as surely.
              preempt(job, call.now,
                      "moved off node " + call.caller.node + " (GPU short of memory)" +
                          (job.spec.checkpointable ? "; resumes from its latest checkpoint" : "; restarts from the beginning"));
            }
            changed = true;
          }
          return changed;
        }
        if (to->second == model::JobPhase::kRunning && migration_target) {
          const model::Migration move = *job.status.migration;
          const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
          const int64_t pause_ms = move.frozen_at_ms > 0 ? now_ms - move.frozen_at_ms : 0;
          job.status.migration.reset();  // its checkpoints stay as they were: the dump is none of them
          job.status.phase = model::JobPhase::kRunning;
          job.status.attempts += 1;  // a new attempt: its node numbers its log lines afresh
          job.status.attempt_nodes = {call.caller.node};
          move_ended = {"migrated", move.pages_from.empty() ? "stop-and-copy" : "post-copy"};
          move_pause_ms = std::max<int64_t>(0, pause_ms);
          job.status.events.push_back(event(model::JobEventType::kMigrated, call.now,
                                            fmt::format("migrated from {} to {}{}; paused {} ms{}", move.from,
                                                        call.caller.node, move.pages_from.empty() ? "" : " (post-copy)",
                                                        std::max<int64_t>(0, pause_ms),
                                                        message.empty() ? "" : "; " + message)));
          return true;
        }
        if (to->second == model::JobPhase::kRunning) {
          job.status.phase = model::JobPhase::kRunning;
          job.status.started_at = call.now;  // the bind time until now; run time counts from here
          job.status.attempts += 1;
          // A checkpoint asked of an earlier run is not this one's to take (it would be taken, or
          // SIGUSR1 sent, as soon as the job starts again).
          job.status.checkpoint_requested_at.reset();
          job.status.attempt_nodes.clear();
          for (const auto& binding : job.status.placement) job.status.attempt_nodes.push_back(binding.node);
          // The agent may say how it started ("resumed from checkpoint sha256:...").
          job.status.events.push_back(event(model::JobEventType::kStarted, call.now,
                                            "started on " + call.caller.node + (message.empty() ? "" : "; " + message)));
          start_latency = static_cast<double>((call.now - job.status.submitted_at).count());
          return true;
        }
        // A gang job (a placement of several nodes) runs one member on each node. It succeeds when
        // every member has, and fails as soon as one does; its other agents see the end and stop.
        const std::string& node = call.caller.node;
        bool gang = job.status.placement.size() > 1;
        int64_t code = exit_code;
        int64_t sig = signal;
        if (to->second == model::JobPhase::kSucceeded && gang) {
          auto& done = job.status.succeeded_nodes;
          if (std::find(done.begin(), done.end(), node) != done.end()) return checkpoint_at.has_value();
          done.push_back(node);
          bool all = std::all_of(job.status.placement.begin(), job.status.placement.end(), [&](const auto& b) {
            return std::find(done.begin(), done.end(), b.node) != done.end();
          });
          if (!all) return true;  // the job runs on until its last member succeeds
          code = 0;
          sig = 0;
        }
        std::string what = code >= 0 ? fmt::format("exit code {}", code) : sig > 0 ? fmt::format("signal {}", sig) : "";
        if (gang && !message.empty()) {
          job.status.message = node + ": " + message;
        } else if (gang && to->second == model::JobPhase::kFailed) {
          job.status.message = node + ": " + (what.empty() ? "failed" : what);
        } else {
          job.status.message = message;
        }
        bool cancelled = job.status.cancel_requested;
        job.status.phase = cancelled ? model::JobPhase::kCancelled : to->second;
        job.status.finished_at = call.now;
        if (code >= 0) job.status.exit_code = static_cast<int>(code);
        if (sig > 0) job.status.signal = static_cast<int>(sig);
        std::string on = gang && to->second == model::JobPhase::kFailed ? " on " + node : "";
        job.status.events.push_back(event(model::JobEventType::kFinished, call.now,
                                          fmt::format("{}{}{}{}", to_string(job.status.phase), on,
                                                      code >= 0 ? fmt::format(", exit code {}", code) : "",
                                                      sig > 0 ? fmt::format(", signal {}", sig) : "")));
        return true;
      },
      audit.dump());
  if (!updated) return error_response(updated.error());
  if (start_latency) ctx_.metrics.submit_to_start.observe({}, *start_latency);
  if (not_taken) ctx_.metrics.checkpoints.inc({{"outcome", "not_taken"}});
  if (!move_ended.first.empty()) {
    ctx_.metrics.migrations.inc({{"outcome", move_ended.first}});
    if (!move_ended.second.empty()) ctx_.metrics.migration_pause.observe({{"mode", move_ended.second}}, move_pause_ms / 1000.0);
  }
  ctx_.wake_scheduler();
  auto now_cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  return json_response(200, job_json(*now_cached.object));
}

net::Response Api::post_logs(const Call& call) {
  const std::string& id = call.param("id");
  if (!call.caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", call.caller.user, "only agents ship logs"));
  }
  // From the nodes the job is bound to, and from those of its latest attempt: a job taken off its
  // node (pre-empted, dumped for a resume) prints until it is stopped, and those lines belong
  // before what it prints when it resumes.
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  const bool ran_there = cached.object && !is_terminal(cached.object->status.phase) &&
                         model::ran_latest_attempt_on(*cached.object, call.caller.node);
  if (!cached.object || !(model::bound_to(*cached.object, call.caller.node) || ran_there)) {
    return error_response(Error::not_found("job", id, "no such job"));
  }
  auto body = parse_body(call.request);
  if (!body) return error_response(body.error());
  if (!body->contains("lines") || !(*body)["lines"].is_array()) {
    return error_response(Error::invalid_argument("lines", "", "expected an array of {seq, stream, time, text}"));
  }
  std::vector<LogLine> lines;
  const Json& array = (*body)["lines"];
  for (size_t i = 0; i < array.size(); ++i) {
    auto line = posted_log_line_from_json(array[i], fmt::format("lines[{}]", i));
    if (!line) return error_response(line.error());
    lines.push_back(std::move(*line));
  }
  // The members of a gang job each number their own lines: the server numbers the job's log and
  // skips, per node, what that node already shipped.
  auto appended = ctx_.logs.append(id, call.caller.node, std::move(lines));
  if (!appended) return error_response(appended.error());
  return json_response(200, {{"last_seq", appended->last_seq}, {"last_node_seq", appended->last_node_seq}});
}

net::Response Api::get_logs(const Call& call) {
  const std::string& id = call.param("id");
  auto cached = visible_job(call, id);
  if (!cached) return error_response(cached.error());
  std::string from_text = call.request.query_value("from_seq");
  int64_t from = 0;
  if (!from_text.empty()) {
    char* end = nullptr;
    from = std::strtoll(from_text.c_str(), &end, 10);
    if (*end != '\0' || from < 0) return error_response(Error::invalid_argument("from_seq", from_text, "expected a sequence number >= 0"));
  }
  bool follow = call.request.query_value("follow") == "1" || call.request.query_value("follow") == "true";
  if (!follow) {
    auto lines = ctx_.logs.read(id, from, 100000);
    if (!lines) return error_response(lines.error());
    net::Response response;
    response.content_type = "application/x-ndjson";
    for (const auto& line : *lines) response.body += to_json(line).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    return response;
  }
  JobLogs& logs = ctx_.logs;
  Metrics& metrics = ctx_.metrics;
  net::Response response;
  response.content_type = "application/x-ndjson";
  response.start_stream = [&logs, &metrics, id, from](std::shared_ptr<net::Stream> stream) {
    // Follow first, then send what is stored, holding the stream's lock across both: a line
    // appended meanwhile waits in the follower until the stored ones are out, then goes only if
    // it was not among them. Nothing is lost between the two and nothing is sent twice.
    struct Cursor {
      std::mutex mutex;
      int64_t sent;
    };
    auto cursor = std::make_shared<Cursor>();
    cursor->sent = from - 1;
    auto deliver = [stream, cursor](const std::vector<LogLine>& lines) {
      std::string out;
      for (const auto& line : lines) {
        if (line.seq <= cursor->sent) continue;
        cursor->sent = line.seq;
        out += to_json(line).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
      }
      if (!out.empty()) stream->push(std::move(out));
    };
    std::shared_ptr<void> handle;
    {
      std::lock_guard lock(cursor->mutex);
      handle = logs.follow(id, [cursor, deliver](const std::vector<LogLine>& lines) {
        std::lock_guard inner(cursor->mutex);
        deliver(lines);
      });
      if (auto stored = logs.read(id, from, SIZE_MAX)) deliver(*stored);
    }
    metrics.watchers.inc({}, 1);
    stream->on_close([handle, &metrics]() mutable {
      handle.reset();
      metrics.watchers.inc({}, -1);
    });
  };
  return response;
}

}  // namespace cnlab::server
