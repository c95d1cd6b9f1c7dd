// What every API object carries: a name, a uid, labels and the store's revision.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/result.h"

namespace cnlab::model {

struct ObjectMeta {
  std::string name;
  std::string uid;
  std::map<std::string, std::string> labels;
  int64_t revision = 0;  // set by the store; increases with every change

  bool operator==(const ObjectMeta&) const = default;
};

// The longest `created_by` a record keeps: a user name, or a system actor ("cnlab server init").
inline constexpr size_t kMaxCreatedByBytes = 256;

// Names are 1..63 characters of a-z, 0-9, '-' and '.', starting and ending alphanumeric, so they
// are safe in URLs, file names and Kubernetes object names.
Status validate_name(std::string_view name, std::string_view field);

Json to_json(const ObjectMeta& meta);
// An API object's JSON split into its parts: {"kind", "metadata", "spec", "status"}. The kind must
// be `kind` (or absent), metadata is required and decoded, no other top-level member is allowed;
// `spec` and `status` point to an empty object when absent (`has_spec` tells which).
struct ObjectParts {
  ObjectMeta meta;
  const Json* spec = nullptr;
  const Json* status = nullptr;
  bool has_spec = false;
};
// `check_name` validates metadata.name (validate_name unless a kind names its objects otherwise,
// as Workspace does with its 64-hex-digit digest).
using NameCheck = Status (*)(std::string_view name, std::string_view field);
Result<ObjectParts> read_object(const Json& json, std::string_view kind, NameCheck check_name = validate_name);

}  // namespace cnlab::model
