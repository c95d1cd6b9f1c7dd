// The audit log's hash chain: each record's hash covers the previous hash, so an edit, a deletion
// or a reordering anywhere shows at the first link after it.
#include <fmt/format.h>

#include "auth/auth.h"

namespace cnlab::auth {

std::string chain_hash(std::string_view prev_hash, std::string_view record) {
  std::string input;
  input.reserve(prev_hash.size() + 1 + record.size());
  input.append(prev_hash).append("\n").append(record);
  return sha256_hex(input);
}

std::optional<AuditProblem> verify_chain(const std::vector<AuditLink>& links) {
  int64_t expected_seq = 1;
  std::string_view prev_hash = kGenesisHash;
  for (const AuditLink& link : links) {
    if (link.seq != expected_seq) {
      return AuditProblem{link.seq, fmt::format("deleted or reordered (expected seq {}, found {})", expected_seq,
                                                link.seq)};
    }
    if (link.prev_hash != prev_hash) {
      return AuditProblem{link.seq, expected_seq == 1
                                        ? std::string("prev_hash of the first record is not the genesis hash")
                                        : fmt::format("prev_hash does not match the hash of seq {} (a record "
                                                      "before it was rewritten)",
                                                      expected_seq - 1)};
    }
    if (link.hash != chain_hash(link.prev_hash, link.record)) {
      return AuditProblem{link.seq, "edited (hash does not match the record)"};
    }
    prev_hash = link.hash;
    ++expected_seq;
  }
  return std::nullopt;
}

}  // namespace cnlab::auth
