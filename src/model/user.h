// A User: someone who may hold tokens and role bindings. Identity comes from tokens; this object
// holds what the platform knows about the person and whether they may act at all.
#pragma once

#include <string>

#include "common/json_reader.h"
#include "model/object_meta.h"

namespace cnlab::model {

struct User {
  ObjectMeta meta;           // name = the user name (what tokens carry in "sub")
  std::string display_name;  // for people; at most 256 bytes, no NUL
  std::string email;         // empty, or one '@' with text on both sides, no spaces; at most 254 bytes
  bool disabled = false;     // a disabled user's tokens are refused

  bool operator==(const User&) const = default;
};

// JSON: {"kind":"User","metadata":{...},"spec":{"display_name","email","disabled"}}; no status.
Json to_json(const User& user);
// Decodes and validates; the error names the JSON path of the first bad field.
Result<User> user_from_json(const Json& json);
// The checks decoding applies, for users built in code.
Status validate(const User& user);

}  // namespace cnlab::model
