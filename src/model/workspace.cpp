#include "model/workspace.h"

#include <fmt/format.h>

#include "model/decode.h"

namespace cnlab::model {

Status validate_digest(std::string_view digest, std::string_view field) {
  if (digest.starts_with(kDigestPrefix) && detail::is_lower_hex(digest.substr(kDigestPrefix.size()), 64)) {
    return Status::ok();
  }
  return Error::invalid_argument(std::string(field), std::string(digest),
                                 "expected \"sha256:\" followed by 64 lowercase hex digits");
}

std::string workspace_name(std::string_view digest) {
  CNLAB_CHECK_MSG(validate_digest(digest, "digest").has_value(), "workspace_name of a bad digest");
  return std::string(digest.substr(kDigestPrefix.size()));
}

Status validate_workspace_name(std::string_view name, std::string_view field) {
  if (detail::is_lower_hex(name, 64)) return Status::ok();
  return Error::invalid_argument(std::string(field), std::string(name),
                                 "a workspace is named by its digest's 64 lowercase hex digits (without \"sha256:\")");
}

Status validate(const Workspace& workspace) {
  if (auto s = validate_workspace_name(workspace.meta.name, "metadata.name"); !s) return s;
  if (auto s = validate_digest(workspace.digest, "spec.digest"); !s) return s;
  if (workspace.meta.name != workspace_name(workspace.digest)) {
    return Error::invalid_argument("metadata.name", workspace.meta.name,
                                   fmt::format("a workspace is named by its digest's hex part: expected \"{}\"",
                                               workspace_name(workspace.digest)));
  }
  if (workspace.size_bytes < 0) {
    return Error::invalid_argument("spec.size_bytes", std::to_string(workspace.size_bytes), "must be 0 or more");
  }
  if (auto s = validate_name(workspace.project, "spec.project"); !s) return s;
  if (!workspace.uploaded_by.empty()) {
    if (auto s = validate_name(workspace.uploaded_by, "spec.uploaded_by"); !s) return s;
  }
  return Status::ok();
}

Json to_json(const Workspace& workspace) {
  Json spec = {{"digest", workspace.digest},
               {"size_bytes", workspace.size_bytes},
               {"project", workspace.project},
               {"uploaded_by", workspace.uploaded_by},
               {"uploaded_at", format_rfc3339(workspace.uploaded_at)}};
  return {{"kind", "Workspace"}, {"metadata", to_json(workspace.meta)}, {"spec", std::move(spec)}};
}

Result<Workspace> workspace_from_json(const Json& json) {
  auto parts = read_object(json, "Workspace", validate_workspace_name);
  if (!parts) return parts.error();
  if (auto s = detail::no_status(parts->status, "Workspace"); !s) return s.error();
  Workspace workspace;
  workspace.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only({"digest", "size_bytes", "project", "uploaded_by", "uploaded_at"});
  workspace.digest = s.string("digest");
  if (s.status()) detail::check(s, validate_digest(workspace.digest, s.path_of("digest")));
  workspace.size_bytes = s.integer_or("size_bytes", 0, 0, INT64_MAX);
  workspace.project = detail::required_name(s, "project");
  workspace.uploaded_by = detail::optional_name(s, "uploaded_by");
  workspace.uploaded_at = detail::required_time(s, "uploaded_at");
  if (!s.status()) return s.status().error();
  if (auto valid = validate(workspace); !valid) return valid.error();
  return workspace;
}

}  // namespace cnlab::model
