// Reads one JSON object field by field, remembering the first error with its path
// ("spec.gpus[2].index"), so decoders stay short and every bad input names its field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/time.h"

namespace cnlab {

using Json = nlohmann::json;

class JsonReader {
 public:
  // `path` names `value` in errors; an empty path is the document root.
  JsonReader(const Json& value, std::string path);

  std::string path_of(std::string_view key) const;
  bool has(std::string_view key) const;

  std::string string(std::string_view key);  // required
  std::string string_or(std::string_view key, std::string fallback);
  int64_t integer_or(std::string_view key, int64_t fallback, int64_t min, int64_t max);
  double number_or(std::string_view key, double fallback, double min, double max);
  bool boolean_or(std::string_view key, bool fallback);
  std::optional<Time> time(std::string_view key);          // RFC 3339, optional
  std::optional<Duration> duration(std::string_view key);  // "2h", optional
  // The member if it is present and of the right type; null (and an error) if of the wrong type.
  const Json* object(std::string_view key);
  const Json* array(std::string_view key);

  // Records an error of the caller's own (e.g. a nested decoder's); the first one wins.
  void fail(Error error);
  // Refuses members other than `known`, so that a misspelt field is not silently ignored.
  void only(std::initializer_list<std::string_view> known);
  // OK, or the first error met.
  Status status() const;

 private:
  const Json* member(std::string_view key, Json::value_t type, const char* type_name);

  const Json& value_;
  std::string path_;
  std::optional<Error> error_;
};

}  // namespace cnlab
