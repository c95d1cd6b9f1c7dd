// An ApiToken: the record of an HS256 token the server minted, so that tokens can be listed and
// revoked. The token itself is never stored; its "jti" names the record.
#pragma once

#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"

namespace cnlab::model {

// The subject of a node agent's credential is this prefix and the node's name.
inline constexpr std::string_view kNodeSubjectPrefix = "node:";

struct ApiToken {
  ObjectMeta meta;         // name = the token's "jti" (a valid object name, e.g. 32 hex digits)
  std::string user;        // the "sub" it speaks for: a user name, or "node:<node name>"
  std::string project;     // its default project; may be empty
  Time expires_at{};       // its "exp"
  bool revoked = false;    // a revoked token is refused even before it expires
  std::string created_by;  // who minted it: a user name or a system actor; may be empty

  bool operator==(const ApiToken&) const = default;
};

// JSON: {"kind":"ApiToken","metadata":{...},"spec":{"user","project","expires_at","revoked",
// "created_by"}}; no status.
Json to_json(const ApiToken& token);
// Decodes and validates; the error names the JSON path of the first bad field.
Result<ApiToken> api_token_from_json(const Json& json);
// The checks decoding applies: a valid user name (or "node:" and a node name), a valid project name
// when set, created_by at most kMaxCreatedByBytes without NUL.
Status validate(const ApiToken& token);

}  // namespace cnlab::model
