#include "model/decode.h"

#include <fmt/format.h>

#include "model/object_meta.h"

namespace cnlab::model::detail {

std::optional<int64_t> optional_integer(JsonReader& r, std::string_view key, int64_t min, int64_t max) {
  if (!r.has(key)) return std::nullopt;
  int64_t value = r.integer_or(key, min, min, max);
  if (!r.status()) return std::nullopt;
  return value;
}

Time required_time(JsonReader& r, std::string_view key) {
  if (!r.has(key)) {
    r.fail(Error::invalid_argument(r.path_of(key), "", "required field is missing"));
    return Time{};
  }
  return r.time(key).value_or(Time{});
}

std::string bounded_string(JsonReader& r, std::string_view key, size_t max_bytes) {
  std::string text = r.string_or(key, "");
  if (text.size() > max_bytes) {
    r.fail(Error::invalid_argument(r.path_of(key), text.substr(0, 64) + "...",
                                   fmt::format("at most {} bytes; this is {}", max_bytes, text.size())));
  } else if (text.find('\0') != std::string::npos) {
    r.fail(Error::invalid_argument(r.path_of(key), text, "must not contain a NUL character"));
  }
  return text;
}

std::string optional_name(JsonReader& r, std::string_view key) {
  std::string name = r.string_or(key, "");
  if (!name.empty() && r.status()) check(r, validate_name(name, r.path_of(key)));
  return name;
}

std::string required_name(JsonReader& r, std::string_view key) {
  std::string name = r.string(key);
  if (r.status()) check(r, validate_name(name, r.path_of(key)));
  return name;
}

Status no_status(const Json* status, std::string_view kind) {
  if (status != nullptr && !status->empty()) {
    return Error::invalid_argument("status", status->dump(), fmt::format("a {} has no status", kind));
  }
  return Status::ok();
}

bool is_lower_hex(std::string_view text, size_t length) {
  if (text.size() != length) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace cnlab::model::detail
