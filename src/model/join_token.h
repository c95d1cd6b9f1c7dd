// A JoinToken: lets a new node's agent join the cluster. The server keeps only the SHA-256 of the
// secret; an agent presents "<token id>.<secret>" and the server compares hashes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"

namespace cnlab::model {

struct JoinToken {
  ObjectMeta meta;            // name = the token id
  std::string secret_sha256;  // 64 lowercase hex digits
  Time expires_at{};
  bool revoked = false;
  int64_t uses = 0;                 // nodes that joined with it so far
  std::optional<int64_t> max_uses;  // >= 1; absent = any number until it expires
  std::string created_by;           // a user name or a system actor; may be empty

  // Whether a node may join with it at `now`: not revoked, not expired, uses left.
  bool usable(Time now) const { return !revoked && now < expires_at && (!max_uses || uses < *max_uses); }
  bool operator==(const JoinToken&) const = default;
};

// JSON: {"kind":"JoinToken","metadata":{...},"spec":{"secret_sha256","expires_at","max_uses",
// "created_by","revoked"},"status":{"uses"}}; max_uses is omitted when absent.
Json to_json(const JoinToken& token);
// Decodes and validates; the error names the JSON path of the first bad field.
Result<JoinToken> join_token_from_json(const Json& json);
// The checks decoding applies: a 64-hex-digit secret hash, uses >= 0, max_uses >= 1, created_by at
// most kMaxCreatedByBytes without NUL.
Status validate(const JoinToken& token);

}  // namespace cnlab::model
