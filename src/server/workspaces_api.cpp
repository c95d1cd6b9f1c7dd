// Workspaces: content-addressed archives of a job's files, uploaded before submission and kept once
// per digest however many uploads and projects name it. The archive is DIR/workspaces/<hex>; the
// store's "workspaces" object (key <hex>) says who uploaded it, to which project, and its size.
//
// A workspace belongs to the project it was first uploaded to. An upload of the same bytes to
// another project (the upload proves the uploader holds them) adds that project as a label
// "cnlab.io/project.<name>" instead of writing the file again; readers are those who may read any
// of its projects. Knowing a digest alone never gives access to the archive.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/api.h"
#include "server/api_error.h"
#include "server/blob_files.h"
#include "server/request_body.h"

namespace cnlab::server {
namespace {

constexpr std::string_view kProjectLabel = "cnlab.io/project.";

// "sha256:<64 hex>" or the 64 hex digits alone, as "sha256:<64 hex>".
Result<std::string> parse_digest(const std::string& text) {
  std::string digest = text.find(':') == std::string::npos ? std::string(model::kDigestPrefix) + text : text;
  if (!model::validate_digest(digest, "digest")) {
    return Error::invalid_argument("digest", text,
                                   "expected \"sha256:\" followed by 64 lowercase hex digits, or the 64 digits alone");
  }
  return digest;
}

// The projects the workspace was uploaded to: the first, then those its labels add.
std::vector<std::string> projects_of(const model::Workspace& workspace) {
  std::vector<std::string> projects = {workspace.project};
  for (const auto& [key, value] : workspace.meta.labels) {
    if (key.starts_with(kProjectLabel) && key.size() > kProjectLabel.size()) {
      projects.push_back(key.substr(kProjectLabel.size()));
    }
  }
  return projects;
}

bool in_project(const model::Workspace& workspace, const std::string& project) {
  for (const auto& p : projects_of(workspace)) {
    if (p == project) return true;
  }
  return false;
}

bool names_workspace_on(const model::Job& job, const std::string& node, const std::string& digest) {
  return job.spec.workspace && job.spec.workspace->digest == digest && model::bound_to(job, node);
}

// HEAD answers carry no body: the client reads none after the head.
net::Response head_only(int status) {
  net::Response response;
  response.status = status;
  response.content_type.clear();
  return response;
}

}  // namespace

Result<model::Workspace> Api::stored_workspace(const std::string& hex) {
  auto record = ctx_.store.get(kind::kWorkspaces, hex);
  if (!record) return record.error();
  auto workspace = model::workspace_from_json(Json::parse(record->value, nullptr, false));
  if (!workspace) {
    return Error::internal("stored workspace " + hex + " does not decode: " + workspace.error().to_string());
  }
  workspace->meta.revision = record->mod_revision;
  return workspace;
}

bool Api::may_read_workspace(const Caller& caller, const model::Workspace& workspace, const std::string& job) const {
  if (caller.is_node()) {
    return ctx_.cache.read([&](const ObjectCache& c) {
      if (!job.empty()) {
        auto named = c.jobs.get(job).object;
        return named && names_workspace_on(*named, caller.node, workspace.digest);
      }
      bool found = false;
      c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) {
        found = found || names_workspace_on(job, caller.node, workspace.digest);
      });
      return found;
    });
  }
  if (caller.admin()) return true;
  for (const auto& project : projects_of(workspace)) {
    if (caller.sees(project)) return true;
  }
  return false;
}

bool Api::may_use_workspace(const Caller& caller, const std::string& project, const model::Workspace& workspace) const {
  return in_project(workspace, project) || (!caller.is_node() && may_read_workspace(caller, workspace));
}

net::Response Api::put_workspace(const Call& call) {
  const Caller& caller = call.caller;
  auto digest = parse_digest(call.param("digest"));
  if (!digest) return error_response(digest.error());
  std::string hex = model::workspace_name(*digest);
  if (caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", caller.user, "nodes do not upload workspaces"));
  }
  std::string project = call.request.query_value("project");
  if (project.empty()) project = caller.default_project;
  if (project.empty()) {
    return error_response(
        Error::invalid_argument("project", "", "required: ?project=NAME (the token names no default project)"));
  }
  bool exists = ctx_.cache.read([&](const ObjectCache& c) { return c.projects.get(project).object != nullptr; });
  if (!exists || !caller.sees(project)) return error_response(Error::not_found("project", project, "no such project"));
  std::string target = project + "/" + *digest;
  if (!caller.can(project, auth::Action::kSubmit)) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "project", project,
                             "you have no role in this project that may upload workspaces");
    audit_refusal(call, "workspaces.create", target, denied);
    return error_response(denied);
  }
  const std::string root = ctx_.dir.workspaces();
  auto mismatch = [&](const std::string& computed) {
    return Error::invalid_argument("digest", *digest,
                                   fmt::format("the body's SHA-256 is sha256:{}, not the digest given ({}); the "
                                               "archive changed or the digest was computed over something else",
                                               computed, *digest));
  };
  // The body goes into place only when it hashes to the digest, and once.
  bool stored = false;
  auto store = [&]() -> Result<BlobInfo> {
    auto written = store_body(call.request, root, hex, [&](const BlobInfo& info) -> Status {
      return info.sha256 == hex ? Status::ok() : Status(mismatch(info.sha256));
    });
    stored = stored || written.has_value();
    return written;
  };

  // Again (a few times at most) when a concurrent upload or share of the same digest wins a commit.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto existing = stored_workspace(hex);
    if (!existing && existing.error().code != ErrorCode::kNotFound) return error_response(existing.error());
    if (existing) {
      // Known: a no-op, once the body is shown to be the same bytes (the file is not rewritten).
      if (!stored && blob_size(root, hex) == existing->size_bytes) {
        auto computed = body_sha256(call.request);
        if (!computed) return error_response(computed.error());
        if (*computed != hex) return error_response(mismatch(*computed));
      } else if (!stored) {
        // The archive went missing from the disk (removed by hand): the upload puts it back.
        spdlog::warn("workspace archive missing, rewritten digest=\"{}\"", *digest);
        if (auto rewritten = store(); !rewritten) return error_response(rewritten.error());
      }
      if (in_project(*existing, project)) return json_response(200, to_json(*existing));
      model::Workspace shared = *existing;
      shared.meta.labels[std::string(kProjectLabel) + project] = caller.user;
      shared.meta.revision = 0;
      auto committed = commit(call, {store::Op::update(kind::kWorkspaces, hex, to_json(shared).dump(), existing->meta.revision)},
                              "workspaces.share", target, {{"size_bytes", existing->size_bytes}});
      if (committed) {
        shared.meta.revision = committed->revision;
        spdlog::info("workspace shared digest=\"{}\" project=\"{}\" user=\"{}\"", *digest, project, caller.user);
        return json_response(200, to_json(shared));
      }
      if (committed.error().code != ErrorCode::kConflict) return error_response(committed.error());
      continue;
    }

    auto written = store();
    if (!written) return error_response(written.error());
    model::Workspace workspace;
    workspace.meta.name = hex;
    workspace.meta.uid = auth::random_hex(16);
    workspace.digest = *digest;
    workspace.size_bytes = written->size_bytes;
    workspace.project = project;
    if (model::validate_name(caller.user, "user")) workspace.uploaded_by = caller.user;
    workspace.uploaded_at = call.now;
    auto committed = commit(call, {store::Op::create(kind::kWorkspaces, hex, to_json(workspace).dump())},
                            "workspaces.create", target, {{"size_bytes", workspace.size_bytes}});
    if (committed) {
      workspace.meta.revision = committed->revision;
      spdlog::info("workspace uploaded digest=\"{}\" project=\"{}\" bytes={}", *digest, project, workspace.size_bytes);
      net::Response response = json_response(201, to_json(workspace));
      response.headers.emplace_back("Location", "/v1/workspaces/" + *digest);
      return response;
    }
    if (committed.error().code != ErrorCode::kAlreadyExists) return error_response(committed.error());
  }
  return error_response(Error::of(ErrorCode::kConflict, "digest", *digest,
                                  "concurrent uploads of this workspace kept changing it; try again"));
}

net::Response Api::head_workspace(const Call& call) {
  auto digest = parse_digest(call.param("digest"));
  if (!digest) return head_only(400);
  auto workspace = stored_workspace(model::workspace_name(*digest));
  if (!workspace) return head_only(workspace.error().code == ErrorCode::kNotFound ? 404 : http_status(workspace.error().code));
  if (!may_read_workspace(call.caller, *workspace, call.request.query_value("job"))) return head_only(404);
  net::Response response = head_only(200);
  response.content_type = "application/octet-stream";
  return response;
}

net::Response Api::get_workspace(const Call& call) {
  auto digest = parse_digest(call.param("digest"));
  if (!digest) return error_response(digest.error());
  std::string hex = model::workspace_name(*digest);
  auto workspace = stored_workspace(hex);
  if (!workspace && workspace.error().code != ErrorCode::kNotFound) return error_response(workspace.error());
  if (!workspace || !may_read_workspace(call.caller, *workspace, call.request.query_value("job"))) {
    return error_response(Error::not_found("digest", *digest, "no such workspace"));
  }
  auto file = blob_file(ctx_.dir.workspaces(), hex);
  if (!file) {
    spdlog::error("workspace archive missing digest=\"{}\" error=\"{}\"", *digest, file.error().to_string());
    return error_response(Error::not_found("digest", *digest, "the workspace's archive is missing on the server; upload it again"));
  }
  net::Response response;
  response.content_type = "application/octet-stream";
  response.body_file = std::move(*file);  // sent from the file, never held in memory
  return response;
}

}  // namespace cnlab::server
