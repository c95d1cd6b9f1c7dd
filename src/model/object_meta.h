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

// Names are 1..63 characters of a-z, 0-9, '-' and '.', starting and ending alphanumeric, so they
// are safe in URLs, file names and Kubernetes object names.
Status validate_name(std::string_view name, std::string_view field);

Json to_json(const ObjectMeta& meta);
// Reads the common fields; the caller checks for unknown ones with JsonReader::only.
ObjectMeta read_meta(JsonReader& metadata);

}  // namespace cnlab::model
