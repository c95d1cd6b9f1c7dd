#include "model/object_meta.h"

#include <fmt/format.h>

#include <cctype>

namespace cnlab::model {

Status validate_name(std::string_view name, std::string_view field) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  bool ok = !name.empty() && name.size() <= 63 && alnum(name.front()) && alnum(name.back());
  for (char c : name) ok = ok && (alnum(c) || c == '-' || c == '.');
  if (ok) return Status::ok();
  return Error::invalid_argument(std::string(field), std::string(name),
                                 "names are 1..63 characters of a-z, 0-9, '-' and '.', starting and ending with a "
                                 "letter or digit");
}

Json to_json(const ObjectMeta& meta) {
  Json j = {{"name", meta.name}};
  if (!meta.uid.empty()) j["uid"] = meta.uid;
  if (!meta.labels.empty()) j["labels"] = meta.labels;
  if (meta.revision != 0) j["revision"] = meta.revision;
  return j;
}

namespace {

ObjectMeta read_meta(JsonReader& metadata, NameCheck check_name) {
  ObjectMeta meta;
  meta.name = metadata.string("name");
  if (metadata.status()) {
    if (auto s = check_name(meta.name, metadata.path_of("name")); !s) metadata.fail(s.error());
  }
  meta.uid = metadata.string_or("uid", "");
  meta.revision = metadata.integer_or("revision", 0, 0, INT64_MAX);
  if (const Json* labels = metadata.object("labels")) {
    for (const auto& [key, value] : labels->items()) {
      if (!value.is_string()) {
        metadata.fail(Error::invalid_argument(metadata.path_of("labels." + key), value.dump(), "expected a string"));
        continue;
      }
      meta.labels[key] = value.get<std::string>();
    }
  }
  return meta;
}

}  // namespace

Result<ObjectParts> read_object(const Json& json, std::string_view kind, NameCheck check_name) {
  static const Json kEmpty = Json::object();
  JsonReader root(json, "");
  root.only({"kind", "metadata", "spec", "status"});
  if (std::string given = root.string_or("kind", std::string(kind)); given != kind) {
    root.fail(Error::invalid_argument("kind", given, fmt::format("expected \"{}\"", kind)));
  }
  const Json* metadata = root.object("metadata");
  if (!metadata && root.status()) root.fail(Error::invalid_argument("metadata", "", "required field is missing"));
  ObjectParts parts;
  parts.spec = root.object("spec");
  parts.status = root.object("status");
  if (!root.status()) return root.status().error();
  parts.has_spec = parts.spec != nullptr;
  if (!parts.spec) parts.spec = &kEmpty;
  if (!parts.status) parts.status = &kEmpty;
  JsonReader meta(*metadata, "metadata");
  meta.only({"name", "uid", "labels", "revision"});
  parts.meta = read_meta(meta, check_name);
  if (!meta.status()) return meta.status().error();
  return parts;
}

}  // namespace cnlab::model
