#include "server/api.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "server/api_error.h"
#include "server/blob_files.h"
#include "server/request_body.h"

namespace cnlab::server {

Api::Api(ApiContext context) : ctx_(std::move(context)) {
  route("POST", "/v1/jobs", &Api::submit_job);
  route("GET", "/v1/jobs", &Api::list_jobs);
  route("GET", "/v1/jobs/{id}", &Api::get_job);
  route("POST", "/v1/jobs/{id}/cancel", &Api::cancel_job);
  route("GET", "/v1/jobs/{id}/events", &Api::job_events);
  route("PUT", "/v1/jobs/{id}/status", &Api::report_job_status);
  route("GET", "/v1/jobs/{id}/logs", &Api::get_logs);
  route("POST", "/v1/jobs/{id}/logs", &Api::post_logs);
  route("PUT", "/v1/jobs/{id}/artifacts/{path...}", &Api::put_artifact, /*public_route=*/false, Body::kUpload,
        &DataDir::artifacts);
  route("GET", "/v1/jobs/{id}/artifacts", &Api::list_artifacts);
  route("GET", "/v1/jobs/{id}/artifacts/{path...}", &Api::get_artifact);
  route("PUT", "/v1/jobs/{id}/checkpoint", &Api::put_checkpoint, /*public_route=*/false, Body::kCheckpoint,
        &DataDir::checkpoints);
  route("GET", "/v1/jobs/{id}/checkpoint", &Api::get_checkpoint);
  route("POST", "/v1/jobs/{id}/checkpoint", &Api::request_checkpoint);
  route("POST", "/v1/jobs/{id}/migrate", &Api::migrate_job);
  route("POST", "/v1/jobs/{id}/release", &Api::release_job);

  route("PUT", "/v1/workspaces/{digest}", &Api::put_workspace, /*public_route=*/false, Body::kUpload,
        &DataDir::workspaces);
  route("HEAD", "/v1/workspaces/{digest}", &Api::head_workspace);
  route("GET", "/v1/workspaces/{digest}", &Api::get_workspace);

  route("POST", "/v1/nodes", &Api::register_node, /*public_route=*/true);
  route("GET", "/v1/nodes", &Api::list_nodes);
  route("GET", "/v1/nodes/{name}", &Api::get_node);
  route("PUT", "/v1/nodes/{name}/heartbeat", &Api::heartbeat);
  route("POST", "/v1/nodes/{name}/certificate", &Api::issue_node_certificate);
  route("POST", "/v1/nodes/{name}/cordon", &Api::cordon_node);
  route("POST", "/v1/nodes/{name}/uncordon", &Api::uncordon_node);
  route("POST", "/v1/nodes/{name}/drain", &Api::drain_node);

  route("POST", "/v1/projects", &Api::create_project);
  route("GET", "/v1/projects", &Api::list_projects);
  route("GET", "/v1/projects/{name}", &Api::get_project);
  route("POST", "/v1/users", &Api::create_user);
  route("GET", "/v1/users", &Api::list_users);
  route("POST", "/v1/rolebindings", &Api::create_role_binding);
  route("GET", "/v1/rolebindings", &Api::list_role_bindings);
  route("DELETE", "/v1/rolebindings/{name}", &Api::delete_role_binding);
  route("PUT", "/v1/quotas/{name}", &Api::put_quota);
  route("GET", "/v1/quotas", &Api::list_quotas);
  route("DELETE", "/v1/quotas/{name}", &Api::delete_quota);
  route("POST", "/v1/tokens", &Api::create_token);
  route("GET", "/v1/tokens", &Api::list_tokens);
  route("POST", "/v1/tokens/{id}/revoke", &Api::revoke_token);
  route("POST", "/v1/join-tokens", &Api::create_join_token);
  route("GET", "/v1/join-tokens", &Api::list_join_tokens);
  route("POST", "/v1/join-tokens/{id}/revoke", &Api::revoke_join_token);
  route("GET", "/v1/whoami", &Api::whoami);

  route("GET", "/v1/audit", &Api::list_audit);
  route("GET", "/v1/audit/verify", &Api::verify_audit);
}

void Api::route(const std::string& method, const std::string& pattern, Handler handler, bool public_route,
                Body body, StoreDir store) {
  router_.add(method, pattern);
  handlers_.push_back({handler, public_route, body, store});
}

size_t Api::limit_of(Body body) const {
  switch (body) {
    case Body::kUpload:
      return ctx_.config.max_upload_bytes;
    case Body::kCheckpoint:
      return ctx_.config.max_checkpoint_bytes;
    case Body::kJson:
      break;
  }
  return ctx_.config.max_body_bytes;
}

size_t Api::body_limit(const std::string& method, const std::string& path,
                       const std::map<std::string, std::string>& headers) const {
  Match match = router_.match(method, path);
  // Only a caller that sent a credential may send more than a JSON body.
  if (!match.route || !headers.count("authorization")) return ctx_.config.max_body_bytes;
  const Entry& entry = handlers_[match.route->index];
  if (!entry.store) return ctx_.config.max_body_bytes;
  // Spooled to disk (spool_dir): without a spool directory, no more than a JSON body in memory;
  // with one, nothing larger than the disk can take, refused before any of it is sent.
  const std::string root = (ctx_.dir.*entry.store)();
  if (!blob_incoming_dir(root)) return ctx_.config.max_body_bytes;
  uintmax_t limit = std::max(limit_of(entry.body), ctx_.config.max_body_bytes);
  std::error_code ec;
  auto space = std::filesystem::space(root, ec);
  if (!ec) limit = std::min<uintmax_t>(limit, space.available);
  return static_cast<size_t>(limit);
}

std::string Api::spool_dir(const std::string& method, const std::string& path) const {
  Match match = router_.match(method, path);
  if (!match.route || !handlers_[match.route->index].store) return "";
  const std::string root = (ctx_.dir.*handlers_[match.route->index].store)();
  auto dir = blob_incoming_dir(root);
  if (!dir) {
    spdlog::error("upload spool directory unavailable root=\"{}\" error=\"{}\"", root, dir.error().to_string());
    return "";  // held in memory instead, where body_limit allows only a JSON body's size
  }
  return *dir;
}

std::optional<net::Response> Api::admit(const net::Request& head) const {
  Match match = router_.match(head.method, head.path);
  if (!match.route) return std::nullopt;
  const Entry& entry = handlers_[match.route->index];
  if (entry.body == Body::kJson || entry.public_route) return std::nullopt;
  auto caller = authenticate(head, ctx_.verifier, ctx_.cache, ctx_.signing.own_issuer, ctx_.clock());
  if (caller) return std::nullopt;
  return error_response(caller.error());
}

net::Response Api::handle(const net::Request& request) {
  auto started = std::chrono::steady_clock::now();
  std::string route_label = "unmatched";
  net::Response response;
  if (request.path == "/healthz" || request.path == "/readyz") {
    route_label = request.path;
    response = json_response(200, {{"status", "ok"}, {"revision", ctx_.store.revision()}});
  } else if (request.path == "/metrics") {
    route_label = "/metrics";
    response.content_type = "text/plain; version=0.0.4";
    response.body = ctx_.metrics.render();
  } else {
    Match match = router_.match(request.method, request.path);
    if (!match.route) {
      response = error_response(match.method_mismatch
                                    ? Error::of(ErrorCode::kInvalidArgument, "method", request.method,
                                                "this path does not take " + request.method)
                                    : Error::not_found("path", request.path, "no such endpoint; see docs/api.md"));
      if (match.method_mismatch) response.status = 405;
    } else {
      route_label = match.route->method + " " + match.route->pattern;
      const Entry& entry = handlers_[match.route->index];
      // The HTTP layer admits bodies up to the upload limit; everything else is JSON, held to less.
      // A checkpoint's handler says which limit it is over (--max-checkpoint-bytes) itself.
      const size_t body_limit = limit_of(entry.body);
      Time now = ctx_.clock();
      Caller anonymous;
      if (entry.body != Body::kCheckpoint && body_size(request) > body_limit) {
        response = error_response(Error::of(ErrorCode::kTooLarge, "body", std::to_string(body_size(request)) + " bytes",
                                            "over this endpoint's limit of " + std::to_string(body_limit) + " bytes"));
      } else if (Result<Caller> caller = entry.public_route ? Result<Caller>(anonymous)
                                                             : authenticate(request, ctx_.verifier, ctx_.cache,
                                                                            ctx_.signing.own_issuer, now);
                 !caller) {
        response = error_response(caller.error());
      } else {
        Call call{request, *caller, match.params, now};
        try {
          response = (this->*entry.handler)(call);
        } catch (const std::exception& e) {
          spdlog::error("handler failed route=\"{}\" error=\"{}\"", route_label, e.what());
          response = error_response(Error::internal("the server failed on this request; see its log"));
        }
      }
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ctx_.metrics.requests.inc({{"route", route_label}, {"code", std::to_string(response.status)}});
  if (!response.start_stream) ctx_.metrics.request_seconds.observe({{"route", route_label}}, seconds);
  return response;
}

Json Api::audit_record(const Call& call, const std::string& action, const std::string& target,
                       const std::string& outcome, Json detail) const {
  Json record = {{"time", format_rfc3339(call.now)},
                 {"actor", call.caller.user.empty() ? "anonymous" : call.caller.user},
                 {"action", action},
                 {"target", target},
                 {"outcome", outcome},
                 {"remote", call.request.remote}};
  if (!detail.empty()) record["detail"] = std::move(detail);
  return record;
}

Result<store::TxnResult> Api::commit(const Call& call, std::vector<store::Op> ops, const std::string& action,
                                     const std::string& target, Json detail) {
  auto started = std::chrono::steady_clock::now();
  std::vector<bool> removes;
  for (const auto& op : ops) removes.push_back(op.type == store::Op::Type::kRemove);
  std::string audit = audit_record(call, action, target, "ok", std::move(detail)).dump();
  auto result = ctx_.store.txn(std::move(ops), std::move(audit));
  ctx_.metrics.store_commit_seconds.observe(
      {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!result) return result;
  for (size_t i = 0; i < result->records.size() && i < removes.size(); ++i) {
    const store::Record& record = result->records[i];
    if (removes[i]) {
      ctx_.cache.apply_removed(record.kind, record.key, result->revision);
    } else {
      ctx_.cache.apply(record);
    }
  }
  return result;
}

void Api::audit_refusal(const Call& call, const std::string& action, const std::string& target, const Error& error) {
  Json detail = {{"error", error.to_string()}};
  std::string audit = audit_record(call, action, target, std::string(api_code(error.code)), std::move(detail)).dump();
  ctx_.store.txn_async({}, std::move(audit), [](Result<store::TxnResult> r) {
    if (!r) spdlog::error("audit append failed error=\"{}\"", r.error().to_string());
  });
}

}  // namespace cnlab::server
