// Private to src/store: the input checks every backend applies before it touches storage.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace cnlab::store::internal {

inline constexpr size_t kMaxNameBytes = 512;

// A kind, key or key prefix: at most 512 bytes, no control characters, and not empty unless
// `allow_empty` (a list or watch prefix).
Status check_name(std::string_view field, std::string_view text, bool allow_empty = false);
// A JSON object's text (an object's value, an audit record).
Status check_json_object(std::string_view field, std::string_view text);
// Every op well-formed, and something to do (at least one op, or an audit record).
Status check_txn(const std::vector<Op>& ops, const std::optional<std::string>& audit);

}  // namespace cnlab::store::internal
