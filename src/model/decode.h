// Private to src/model: small pieces the object decoders share (enums by name, optional numbers,
// hex digests, bounded strings). Not part of model.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/json_reader.h"
#include "common/result.h"
#include "common/time.h"

namespace cnlab::model::detail {

// "Ready, NotReady, Lost" from an enum's name table, for error messages.
template <typename E, size_t N>
std::string names_of(const std::pair<E, std::string_view> (&table)[N]) {
  std::string out;
  for (const auto& [value, name] : table) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

template <typename E, size_t N>
std::optional<E> find_by_name(const std::pair<E, std::string_view> (&table)[N], std::string_view name) {
  for (const auto& [value, n] : table) {
    if (n == name) return value;
  }
  return std::nullopt;
}

template <typename E, size_t N>
std::string_view name_of(const std::pair<E, std::string_view> (&table)[N], E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "Unknown";
}

// Reads `key` as one of the table's names; absent gives `fallback`. A name not in the table fails
// with `what` ("phases") and the list of known names.
template <typename E, size_t N>
E read_enum(JsonReader& r, std::string_view key, const std::pair<E, std::string_view> (&table)[N], E fallback,
            std::string_view what) {
  if (!r.has(key)) return fallback;
  std::string text = r.string_or(key, "");
  if (!r.status()) return fallback;
  if (auto value = find_by_name(table, text)) return *value;
  r.fail(Error::invalid_argument(r.path_of(key), text, "known " + std::string(what) + ": " + names_of(table)));
  return fallback;
}

// An optional whole number: absent (or null) gives nullopt.
std::optional<int64_t> optional_integer(JsonReader& r, std::string_view key, int64_t min, int64_t max);
// A required RFC 3339 time.
Time required_time(JsonReader& r, std::string_view key);
// A string of at most `max_bytes` bytes with no NUL; absent gives "".
std::string bounded_string(JsonReader& r, std::string_view key, size_t max_bytes);
// An optional object name (validate_name when not empty); absent gives "".
std::string optional_name(JsonReader& r, std::string_view key);
// A required object name (validate_name).
std::string required_name(JsonReader& r, std::string_view key);

// Records `status`'s error in `r` (the first error wins).
inline void check(JsonReader& r, const Status& status) {
  if (!status) r.fail(status.error());
}

// Refuses a non-empty "status" on objects that have none.
Status no_status(const Json* status, std::string_view kind);

bool is_lower_hex(std::string_view text, size_t length);

}  // namespace cnlab::model::detail
