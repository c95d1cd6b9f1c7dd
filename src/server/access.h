// Who is calling and what they may do: the bearer token verified, revocation checked against the
// token records, and the caller's role bindings gathered from the cache.
#pragma once

#include <optional>
#include <string>

#include "auth/auth.h"
#include "net/net.h"
#include "server/object_cache.h"

namespace cnlab::server {

struct Caller {
  std::string user;            // the token's subject; "node:<name>" for an agent
  std::string node;            // the node an agent credential speaks for, else empty
  std::string default_project; // from the token, may be empty
  std::string token_id;
  Time token_expires_at{};
  auth::Bindings bindings;

  bool is_node() const { return !node.empty(); }
  bool admin() const { return bindings.is_admin(); }
  // Whether the caller's role in `project` allows `action` (admins everywhere).
  bool can(const std::string& project, auth::Action action) const;
  // Whether the caller may see `project` at all (any role in it).
  bool sees(const std::string& project) const { return admin() || bindings.role_in(project).has_value(); }
};

// Verifies the request's bearer token. Tokens the server minted must have a record that is not
// revoked (so revocation works); tokens from the outside identity provider map to a user by
// subject. Errors are kUnauthenticated with the reason.
Result<Caller> authenticate(const net::Request& request, const auth::Verifier& verifier, const ObjectCache& cache,
                            const std::string& own_issuer, Time now);

// The caller's bindings, read from the cache (the caller holds its read lock).
auth::Bindings bindings_of(const ObjectCache& cache, const std::string& user);

}  // namespace cnlab::server
