#include "server/access.h"

namespace cnlab::server {

bool Caller::can(const std::string& project, auth::Action action) const {
  auto role = bindings.role_in(project);
  return role && auth::allows(*role, action);
}

auth::Bindings bindings_of(const ObjectCache& cache, const std::string& user) {
  auth::Bindings bindings;
  cache.role_bindings.for_each([&](const std::string&, const model::RoleBinding& rb, int64_t) {
    if (rb.user != user) return;
    auto role = auth::parse_role(rb.role, "role");
    if (!role) return;
    auto [it, inserted] = bindings.by_project.emplace(rb.project, *role);
    if (!inserted && *role > it->second) it->second = *role;
  });
  return bindings;
}

Result<Caller> authenticate(const net::Request& request, const auth::Verifier& verifier, const ObjectCache& cache,
                            const std::string& own_issuer, Time now) {
  std::string header = request.header("authorization");
  static constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    return Error::of(ErrorCode::kUnauthenticated, "Authorization", "", "a bearer token is required");
  }
  if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0) {
    return Error::of(ErrorCode::kUnauthenticated, "Authorization", header.substr(0, 16) + "...",
                     "expected \"Bearer <token>\"");
  }
  auto principal = verifier.verify(std::string_view(header).substr(kBearer.size()), now);
  if (!principal) return principal.error();

  Caller caller;
  caller.user = principal->subject;
  caller.default_project = principal->project;
  caller.token_id = principal->token_id;
  caller.token_expires_at = principal->expires_at;
  return cache.read([&](const ObjectCache& c) -> Result<Caller> {
    if (principal->issuer == own_issuer) {
      auto record = c.api_tokens.get(principal->token_id);
      if (!record.object) {
        return Error::of(ErrorCode::kUnauthenticated, "token", principal->token_id, "token is not known to this server");
      }
      if (record.object->revoked) {
        return Error::of(ErrorCode::kUnauthenticated, "token", principal->token_id, "token was revoked");
      }
      if (record.object->user != principal->subject) {
        return Error::of(ErrorCode::kUnauthenticated, "token", principal->token_id, "token subject does not match its record");
      }
    }
    if (principal->is_node()) {
      // Node credentials come only from join tokens, so only the server's own tokens are nodes.
      if (principal->issuer != own_issuer) {
        return Error::of(ErrorCode::kUnauthenticated, "token.sub", principal->subject,
                         "node subjects are only valid in tokens this server issued");
      }
      caller.node = principal->subject.substr(5);
      return caller;
    }
    auto user = c.users.get(caller.user);
    if (user.object && user.object->disabled) {
      return Error::of(ErrorCode::kUnauthenticated, "user", caller.user, "user is disabled");
    }
    caller.bindings = bindings_of(c, caller.user);
    return caller;
  });
}

}  // namespace cnlab::server
