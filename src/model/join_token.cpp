#include "model/join_token.h"

#include "model/decode.h"

namespace cnlab::model {

Status validate(const JoinToken& token) {
  if (auto s = validate_name(token.meta.name, "metadata.name"); !s) return s;
  if (!detail::is_lower_hex(token.secret_sha256, 64)) {
    return Error::invalid_argument("spec.secret_sha256", token.secret_sha256,
                                   "expected the secret's SHA-256 as 64 lowercase hex digits");
  }
  if (token.uses < 0) return Error::invalid_argument("status.uses", std::to_string(token.uses), "must be 0 or more");
  if (token.max_uses && *token.max_uses < 1) {
    return Error::invalid_argument("spec.max_uses", std::to_string(*token.max_uses), "must be 1 or more");
  }
  if (token.created_by.size() > kMaxCreatedByBytes || token.created_by.find('\0') != std::string::npos) {
    return Error::invalid_argument("spec.created_by", token.created_by, "at most 256 bytes, without NUL");
  }
  return Status::ok();
}

Json to_json(const JoinToken& token) {
  Json spec = {{"secret_sha256", token.secret_sha256},
               {"expires_at", format_rfc3339(token.expires_at)},
               {"created_by", token.created_by},
               {"revoked", token.revoked}};
  if (token.max_uses) spec["max_uses"] = *token.max_uses;
  return {{"kind", "JoinToken"},
          {"metadata", to_json(token.meta)},
          {"spec", std::move(spec)},
          {"status", {{"uses", token.uses}}}};
}

Result<JoinToken> join_token_from_json(const Json& json) {
  auto parts = read_object(json, "JoinToken");
  if (!parts) return parts.error();
  JoinToken token;
  token.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only({"secret_sha256", "expires_at", "max_uses", "created_by", "revoked"});
  token.secret_sha256 = s.string("secret_sha256");
  if (s.status() && !detail::is_lower_hex(token.secret_sha256, 64)) {
    s.fail(Error::invalid_argument(s.path_of("secret_sha256"), token.secret_sha256,
                                   "expected the secret's SHA-256 as 64 lowercase hex digits"));
  }
  token.expires_at = detail::required_time(s, "expires_at");
  token.max_uses = detail::optional_integer(s, "max_uses", 1, INT64_MAX);
  token.created_by = detail::bounded_string(s, "created_by", kMaxCreatedByBytes);
  token.revoked = s.boolean_or("revoked", false);
  if (!s.status()) return s.status().error();
  JsonReader st(*parts->status, "status");
  st.only({"uses"});
  token.uses = st.integer_or("uses", 0, 0, INT64_MAX);
  if (!st.status()) return st.status().error();
  if (auto valid = validate(token); !valid) return valid.error();
  return token;
}

}  // namespace cnlab::model
