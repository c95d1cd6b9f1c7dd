// A Workspace: an uploaded, content-addressed archive of a job's files. Jobs name it by digest
// (spec.workspace); the object records who uploaded it, for which project, and its size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"

namespace cnlab::model {

inline constexpr std::string_view kDigestPrefix = "sha256:";

// "sha256:" followed by 64 lowercase hex digits; the error names `field`.
Status validate_digest(std::string_view digest, std::string_view field);
// The object name of the workspace with `digest`: its hex part (the digest without "sha256:").
// `digest` must be valid.
std::string workspace_name(std::string_view digest);
// Workspace names are 64 lowercase hex digits: one more character than validate_name allows, so
// Workspaces (alone) are named under this rule instead.
Status validate_workspace_name(std::string_view name, std::string_view field);

struct Workspace {
  ObjectMeta meta;         // name = workspace_name(digest)
  std::string digest;      // "sha256:<64 hex>"
  int64_t size_bytes = 0;  // of the archive as uploaded
  std::string project;
  std::string uploaded_by;  // a user name
  Time uploaded_at{};

  bool operator==(const Workspace&) const = default;
};

// JSON: {"kind":"Workspace","metadata":{...},"spec":{"digest","size_bytes","project","uploaded_by",
// "uploaded_at"}}; a Workspace has no status.
Json to_json(const Workspace& workspace);
// Decodes and validates; the error names the JSON path of the first bad field.
Result<Workspace> workspace_from_json(const Json& json);
// The checks decoding applies: a valid digest that metadata.name matches, size_bytes >= 0, a valid
// project name and (when set) uploader name.
Status validate(const Workspace& workspace);

}  // namespace cnlab::model
