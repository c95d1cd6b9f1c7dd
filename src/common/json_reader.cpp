#include "common/json_reader.h"

#include <fmt/format.h>

#include <cmath>

namespace cnlab {

JsonReader::JsonReader(const Json& value, std::string path) : value_(value), path_(std::move(path)) {
  if (!value_.is_object()) fail(Error::invalid_argument(path_.empty() ? "(document)" : path_, value_.dump(),
                                                      "expected a JSON object"));
}

std::string JsonReader::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool JsonReader::has(std::string_view key) const {
  return value_.is_object() && value_.contains(key) && !value_.at(std::string(key)).is_null();
}

void JsonReader::fail(Error error) {
  if (!error_) error_ = std::move(error);
}

Status JsonReader::status() const { return error_ ? Status(*error_) : Status::ok(); }

const Json* JsonReader::member(std::string_view key, Json::value_t type, const char* type_name) {
  if (!has(key)) return nullptr;
  const Json& m = value_.at(std::string(key));
  bool matches = m.type() == type || (type == Json::value_t::number_integer && m.is_number_unsigned()) ||
                 (type == Json::value_t::number_float && m.is_number());
  if (!matches) {
    fail(Error::invalid_argument(path_of(key), m.dump(), fmt::format("expected {}", type_name)));
    return nullptr;
  }
  return &m;
}

std::string JsonReader::string(std::string_view key) {
  if (!has(key)) {
    fail(Error::invalid_argument(path_of(key), "", "required field is missing"));
    return {};
  }
  return string_or(key, {});
}

std::string JsonReader::string_or(std::string_view key, std::string fallback) {
  const Json* m = member(key, Json::value_t::string, "a string");
  return m ? m->get<std::string>() : fallback;
}

int64_t JsonReader::integer_or(std::string_view key, int64_t fallback, int64_t min, int64_t max) {
  const Json* m = member(key, Json::value_t::number_integer, "a whole number");
  if (!m) return fallback;
  if (m->is_number_unsigned() && m->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(Error::invalid_argument(path_of(key), m->dump(), fmt::format("must be {}..{}", min, max)));
    return fallback;
  }
  int64_t v = m->get<int64_t>();
  if (v < min || v > max) {
    fail(Error::invalid_argument(path_of(key), m->dump(), fmt::format("must be {}..{}", min, max)));
    return fallback;
  }
  return v;
}

double JsonReader::number_or(std::string_view key, double fallback, double min, double max) {
  const Json* m = member(key, Json::value_t::number_float, "a number");
  if (!m) return fallback;
  double v = m->get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    fail(Error::invalid_argument(path_of(key), m->dump(), fmt::format("must be {}..{}", min, max)));
    return fallback;
  }
  return v;
}

bool JsonReader::boolean_or(std::string_view key, bool fallback) {
  const Json* m = member(key, Json::value_t::boolean, "true or false");
  return m ? m->get<bool>() : fallback;
}

std::optional<Time> JsonReader::time(std::string_view key) {
  const Json* m = member(key, Json::value_t::string, "an RFC 3339 time string");
  if (!m) return std::nullopt;
  auto t = parse_rfc3339(m->get<std::string>(), path_of(key));
  if (!t) {
    fail(t.error());
    return std::nullopt;
  }
  return *t;
}

std::optional<Duration> JsonReader::duration(std::string_view key) {
  const Json* m = member(key, Json::value_t::string, "a duration string such as \"2h\"");
  if (!m) return std::nullopt;
  auto d = parse_duration(m->get<std::string>(), path_of(key));
  if (!d) {
    fail(d.error());
    return std::nullopt;
  }
  return *d;
}

const Json* JsonReader::object(std::string_view key) { return member(key, Json::value_t::object, "an object"); }

const Json* JsonReader::array(std::string_view key) { return member(key, Json::value_t::array, "an array"); }

void JsonReader::only(std::initializer_list<std::string_view> known) {
  if (!value_.is_object()) return;
  for (const auto& [key, unused] : value_.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) {
      std::string names;
      for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      fail(Error::invalid_argument(path_of(key), key, "unknown field; known fields: " + names));
      return;
    }
  }
}

}  // namespace cnlab
