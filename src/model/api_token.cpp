#include "model/api_token.h"

#include "model/decode.h"

namespace cnlab::model {

Status validate(const ApiToken& token) {
  if (auto s = validate_name(token.meta.name, "metadata.name"); !s) return s;
  std::string_view user = token.user;
  if (user.starts_with(kNodeSubjectPrefix)) user.remove_prefix(kNodeSubjectPrefix.size());
  if (auto s = validate_name(user, "spec.user"); !s) {
    return Error::invalid_argument("spec.user", token.user,
                                   "expected a user name, or \"node:\" and a node name; " + s.error().message);
  }
  if (!token.project.empty()) {
    if (auto s = validate_name(token.project, "spec.project"); !s) return s;
  }
  if (token.created_by.size() > kMaxCreatedByBytes || token.created_by.find('\0') != std::string::npos) {
    return Error::invalid_argument("spec.created_by", token.created_by, "at most 256 bytes, without NUL");
  }
  return Status::ok();
}

Json to_json(const ApiToken& token) {
  Json spec = {{"user", token.user},
               {"project", token.project},
               {"expires_at", format_rfc3339(token.expires_at)},
               {"revoked", token.revoked},
               {"created_by", token.created_by}};
  return {{"kind", "ApiToken"}, {"metadata", to_json(token.meta)}, {"spec", std::move(spec)}};
}

Result<ApiToken> api_token_from_json(const Json& json) {
  auto parts = read_object(json, "ApiToken");
  if (!parts) return parts.error();
  if (auto s = detail::no_status(parts->status, "ApiToken"); !s) return s.error();
  ApiToken token;
  token.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only({"user", "project", "expires_at", "revoked", "created_by"});
  token.user = s.string("user");
  token.project = detail::optional_name(s, "project");
  token.expires_at = detail::required_time(s, "expires_at");
  token.revoked = s.boolean_or("revoked", false);
  token.created_by = detail::bounded_string(s, "created_by", kMaxCreatedByBytes);
  if (!s.status()) return s.status().error();
  if (auto valid = validate(token); !valid) return valid.error();
  return token;
}

}  // namespace cnlab::model
