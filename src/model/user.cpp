#include "model/user.h"

#include "model/decode.h"

namespace cnlab::model {
namespace {

constexpr size_t kMaxDisplayName = 256;
constexpr size_t kMaxEmail = 254;

}  // namespace

Status validate(const User& user) {
  if (auto s = validate_name(user.meta.name, "metadata.name"); !s) return s;
  if (user.display_name.size() > kMaxDisplayName || user.display_name.find('\0') != std::string::npos) {
    return Error::invalid_argument("spec.display_name", user.display_name, "at most 256 bytes, without NUL");
  }
  if (!user.email.empty()) {
    size_t at = user.email.find('@');
    bool ok = user.email.size() <= kMaxEmail && at != std::string::npos && at > 0 && at + 1 < user.email.size() &&
              user.email.find('@', at + 1) == std::string::npos;
    for (char c : user.email) ok = ok && static_cast<unsigned char>(c) > ' ' && c != 0x7f;
    if (!ok) {
      return Error::invalid_argument("spec.email", user.email,
                                     "expected an address such as alice@example.com (or nothing)");
    }
  }
  return Status::ok();
}

Json to_json(const User& user) {
  Json spec = {{"display_name", user.display_name}, {"email", user.email}, {"disabled", user.disabled}};
  return {{"kind", "User"}, {"metadata", to_json(user.meta)}, {"spec", std::move(spec)}};
}

Result<User> user_from_json(const Json& json) {
  auto parts = read_object(json, "User");
  if (!parts) return parts.error();
  if (auto s = detail::no_status(parts->status, "User"); !s) return s.error();
  User user;
  user.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only({"display_name", "email", "disabled"});
  user.display_name = s.string_or("display_name", "");
  user.email = s.string_or("email", "");
  user.disabled = s.boolean_or("disabled", false);
  if (!s.status()) return s.status().error();
  if (auto valid = validate(user); !valid) return valid.error();
  return user;
}

}  // namespace cnlab::model
