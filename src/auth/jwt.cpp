// JWT (compact JWS) verification and minting. HS256 with the server's own secret; RS256 and ES256
// against an outside identity provider's JWKS. The issuer a token claims decides which algorithm
// it must use, so no key ever serves as the wrong kind of key (algorithm confusion).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "auth/auth.h"
#include "auth/crypto.h"
#include "common/check.h"
#include "common/strings.h"

namespace cnlab::auth {
namespace {

constexpr int64_t kMaxNumericDate = 253402300799;  // 9999-12-31T23:59:59Z
constexpr size_t kMaxJwksBytes = 1 << 20;
constexpr size_t kMinSecretBytes = 32;  // RFC 7518 section 3.2: a key of at least the hash size
constexpr std::chrono::seconds kMaxLeeway{86400};

enum class Alg { kHs256, kRs256, kEs256 };
enum class Family { kRsa, kEc };

std::string_view name_of(Alg alg) {
  switch (alg) {
    case Alg::kHs256: return "HS256";
    case Alg::kRs256: return "RS256";
    case Alg::kEs256: return "ES256";
  }
  return "?";
}

std::string_view name_of(Family family) { return family == Family::kRsa ? "RSA" : "EC"; }

Family family_of(Alg alg) {
  CNLAB_CHECK(alg != Alg::kHs256);
  return alg == Alg::kRs256 ? Family::kRsa : Family::kEc;
}

// Text from a token, made fit for one log line: printable ASCII only, at most 64 characters.
std::string printable(std::string_view text) {
  constexpr size_t kMax = 64;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    char c = text[i];
    out += (c >= 0x20 && c <= 0x7e) ? c : '?';
  }
  if (text.size() > kMax) out += "...";
  return out;
}

std::string dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

Error refused(std::string field, std::string_view value, std::string message) {
  return Error::of(ErrorCode::kUnauthenticated, std::move(field), printable(value), std::move(message));
}

// A JSON object, or nothing for text that is not one.
std::optional<Json> parse_object(std::string_view text) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object()) return std::nullopt;
  return value;
}

// A NumericDate claim as whole seconds, or nothing when it is not a number from 1970 to year 9999.
std::optional<int64_t> numeric_date(const Json& value) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(kMaxNumericDate)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < 0 || v > kMaxNumericDate) return std::nullopt;
    return v;
  }
  if (value.is_number_float()) {
    double v = value.get<double>();
    if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxNumericDate)) return std::nullopt;
    return static_cast<int64_t>(std::floor(v));
  }
  return std::nullopt;
}

// ---- JWKS -------------------------------------------------------------------------------------

struct Jwk {
  std::string kid;  // may be empty
  Family family;
  detail::PKey key;
};

struct KeySet {
  std::vector<Jwk> keys;
  std::map<std::string, std::string> skipped;  // kid -> why this server does not use that key
};

Error jwks_error(const std::string& file, std::string_view path, std::string value, std::string message) {
  return Error::invalid_argument(path.empty() ? file : fmt::format("{}: {}", file, path), std::move(value),
                                 std::move(message));
}

Error with_file(const std::string& file, Error error) {
  error.field = error.field.empty() ? file : fmt::format("{}: {}", file, error.field);
  return error;
}

Result<std::string> decoded_member(const std::string& file, const std::string& path, const std::string& text) {
  auto bytes = base64url_decode(text);
  if (!bytes) return jwks_error(file, path, printable(text), "not base64url: " + bytes.error().message);
  if (bytes->empty()) return jwks_error(file, path, text, "must not be empty");
  return bytes;
}

Result<Jwk> load_rsa(const std::string& file, const std::string& path, JsonReader& reader, std::string kid) {
  std::string n = reader.string("n");
  std::string e = reader.string("e");
  if (auto status = reader.status(); !status) return with_file(file, status.error());
  auto n_bytes = decoded_member(file, path + ".n", n);
  if (!n_bytes) return n_bytes.error();
  auto e_bytes = decoded_member(file, path + ".e", e);
  if (!e_bytes) return e_bytes.error();
  auto key = detail::rsa_public_key(*n_bytes, *e_bytes);
  if (!key) return jwks_error(file, path, kid, key.error().message);
  return Jwk{std::move(kid), Family::kRsa, std::move(*key)};
}

Result<Jwk> load_ec(const std::string& file, const std::string& path, JsonReader& reader, std::string kid) {
  std::string x = reader.string("x");
  std::string y = reader.string("y");
  if (auto status = reader.status(); !status) return with_file(file, status.error());
  auto x_bytes = decoded_member(file, path + ".x", x);
  if (!x_bytes) return x_bytes.error();
  auto y_bytes = decoded_member(file, path + ".y", y);
  if (!y_bytes) return y_bytes.error();
  if (x_bytes->size() != 32) {
    return jwks_error(file, path + ".x", x, fmt::format("must be 32 bytes for P-256, got {}", x_bytes->size()));
  }
  if (y_bytes->size() != 32) {
    return jwks_error(file, path + ".y", y, fmt::format("must be 32 bytes for P-256, got {}", y_bytes->size()));
  }
  auto key = detail::ec_p256_public_key(*x_bytes, *y_bytes);
  if (!key) return jwks_error(file, path, kid, key.error().message);
  return Jwk{std::move(kid), Family::kEc, std::move(*key)};
}

Result<KeySet> load_jwks(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return jwks_error(file, "", "", fmt::format("cannot open the JWKS file: {}", std::strerror(errno)));
  std::string text;
  text.resize(kMaxJwksBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return jwks_error(file, "", "", "cannot read the JWKS file");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxJwksBytes) {
    return jwks_error(file, "", "", fmt::format("JWKS file is over {} bytes", kMaxJwksBytes));
  }

  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    return jwks_error(file, "", "", fmt::format("not valid JSON: {}", e.what()));
  }
  JsonReader root(doc, "");
  const Json* keys = root.array("keys");
  if (auto status = root.status(); !status) return with_file(file, status.error());
  if (!keys) return jwks_error(file, "keys", "", "required field is missing; a JWKS is {\"keys\": [...]}");

  KeySet set;
  for (size_t i = 0; i < keys->size(); ++i) {
    std::string path = fmt::format("keys[{}]", i);
    JsonReader reader((*keys)[i], path);
    std::string kty = reader.string("kty");
    std::string kid = reader.string_or("kid", "");
    std::string use = reader.string_or("use", "");
    std::string alg = reader.string_or("alg", "");
    if (auto status = reader.status(); !status) return with_file(file, status.error());
    auto skip = [&](std::string why) {
      if (!kid.empty()) set.skipped.emplace(kid, std::move(why));
    };

    if (!use.empty() && use != "sig") {
      skip(fmt::format("its \"use\" is \"{}\", not \"sig\"", use));
      continue;
    }
    Result<Jwk> key = Error::internal("unset");
    if (kty == "RSA") {
      if (!alg.empty() && alg != "RS256") {
        skip(fmt::format("it is for alg \"{}\"; accepted: RS256", alg));
        continue;
      }
      key = load_rsa(file, path, reader, kid);
    } else if (kty == "EC") {
      std::string crv = reader.string("crv");
      if (auto status = reader.status(); !status) return with_file(file, status.error());
      if (crv != "P-256") {
        skip(fmt::format("its curve is \"{}\"; accepted: P-256", crv));
        continue;
      }
      if (!alg.empty() && alg != "ES256") {
        skip(fmt::format("it is for alg \"{}\"; accepted: ES256", alg));
        continue;
      }
      key = load_ec(file, path, reader, kid);
    } else {
      skip(fmt::format("its kty is \"{}\"; accepted: RSA, EC", kty));
      continue;
    }
    if (!key) return key.error();
    if (!kid.empty()) {
      bool duplicate = std::any_of(set.keys.begin(), set.keys.end(), [&](const Jwk& k) { return k.kid == kid; });
      if (duplicate) return jwks_error(file, path + ".kid", kid, "duplicate kid; each key needs its own");
    }
    set.keys.push_back(std::move(*key));
  }
  if (set.keys.empty()) {
    return jwks_error(file, "keys", "",
                      "no usable signing key; need an RSA key (RS256) or an EC P-256 key (ES256) whose \"use\" "
                      "is \"sig\" or absent");
  }
  return set;
}

// ---- Verifier ---------------------------------------------------------------------------------

class JwtVerifier final : public Verifier {
 public:
  JwtVerifier(VerifierOptions options, KeySet keys) : options_(std::move(options)), keys_(std::move(keys)) {}

  Result<Principal> verify(std::string_view token, Time now) const override {
    try {
      return check(token, now);
    } catch (const std::exception& e) {  // nothing should throw; if it does, the token is refused
      return refused("token", "", fmt::format("malformed token: {}", e.what()));
    }
  }

 private:
  bool jwks_enabled() const { return !keys_.keys.empty(); }
  std::string accepted_issuers() const {
    return jwks_enabled() ? fmt::format("\"{}\", \"{}\"", options_.own_issuer, options_.external_issuer)
                          : fmt::format("\"{}\"", options_.own_issuer);
  }

  Result<Principal> check(std::string_view token, Time now) const;
  Status check_signature(Alg alg, const Json& header, std::string_view signing_input,
                         std::string_view signature_b64) const;
  Result<const Jwk*> pick_key(Alg alg, const Json& header) const;

  VerifierOptions options_;
  KeySet keys_;
};

Result<Principal> JwtVerifier::check(std::string_view token, Time now) const {
  // Size first: nothing of an oversized token is parsed.
  if (token.size() > options_.max_token_bytes) {
    return refused("token", "", fmt::format("token is {} bytes, over the limit of {}", token.size(),
                                            options_.max_token_bytes));
  }
  size_t dots = static_cast<size_t>(std::count(token.begin(), token.end(), '.'));
  if (dots != 2) {
    return refused("token", "", fmt::format("not a compact JWS: expected three base64url parts separated by '.', "
                                            "found {}", dots + 1));
  }
  size_t first = token.find('.');
  size_t second = token.find('.', first + 1);
  std::string_view header_b64 = token.substr(0, first);
  std::string_view payload_b64 = token.substr(first + 1, second - first - 1);
  std::string_view signature_b64 = token.substr(second + 1);

  // ---- header: which algorithm
  auto header_text = base64url_decode(header_b64);
  if (!header_text) return refused("token.header", "", "not base64url: " + header_text.error().message);
  auto header = parse_object(*header_text);
  if (!header) return refused("token.header", *header_text, "not a JSON object");
  auto alg_it = header->find("alg");
  if (alg_it == header->end() || !alg_it->is_string()) {
    return refused("token.header.alg", "", "missing, or not a string; accepted: HS256, RS256, ES256");
  }
  const std::string alg_text = alg_it->get<std::string>();
  if (to_lower(alg_text) == "none") {
    return refused("token.header.alg", alg_text, "alg \"none\" is refused: every token must be signed");
  }
  Alg alg;
  if (alg_text == "HS256") {
    alg = Alg::kHs256;
  } else if (alg_text == "RS256") {
    alg = Alg::kRs256;
  } else if (alg_text == "ES256") {
    alg = Alg::kEs256;
  } else {
    return refused("token.header.alg", alg_text, "unsupported alg; accepted: HS256, RS256, ES256");
  }
  if (header->contains("crit")) {
    return refused("token.header.crit", dump((*header)["crit"]),
                   "\"crit\" extensions are not supported, so a token that requires them is refused");
  }
  if (alg == Alg::kHs256 && options_.hs256_secret.empty()) {
    return refused("token.header.alg", alg_text, "HS256 is not enabled: the server has no signing secret");
  }
  if (alg != Alg::kHs256 && !jwks_enabled()) {
    return refused("token.header.alg", alg_text,
                   fmt::format("{} is not enabled: no JWKS is configured for an external issuer", alg_text));
  }

  // ---- payload: the issuer decides which algorithm is allowed
  auto payload_text = base64url_decode(payload_b64);
  if (!payload_text) return refused("token.payload", "", "not base64url: " + payload_text.error().message);
  auto claims = parse_object(*payload_text);
  if (!claims) return refused("token.payload", "", "not a JSON object");
  auto iss_it = claims->find("iss");
  if (iss_it == claims->end() || !iss_it->is_string()) {
    return refused("token.payload.iss", "", "missing \"iss\" claim, or not a string; accepted: " + accepted_issuers());
  }
  const std::string iss = iss_it->get<std::string>();
  if (iss == options_.own_issuer) {
    if (alg != Alg::kHs256) {
      return refused("token.header.alg", alg_text,
                     fmt::format("algorithm confusion: tokens from the server's own issuer \"{}\" must be HS256",
                                 options_.own_issuer));
    }
  } else if (jwks_enabled() && iss == options_.external_issuer) {
    if (alg == Alg::kHs256) {
      return refused("token.header.alg", alg_text,
                     fmt::format("algorithm confusion: tokens from the external issuer \"{}\" must be RS256 or ES256",
                                 options_.external_issuer));
    }
  } else {
    return refused("token.payload.iss", iss, "not an accepted issuer; accepted: " + accepted_issuers());
  }

  // ---- signature
  std::string_view signing_input = token.substr(0, second);
  if (auto status = check_signature(alg, *header, signing_input, signature_b64); !status) return status.error();

  // ---- claims, now that they are known to come from the issuer
  auto exp_it = claims->find("exp");
  if (exp_it == claims->end()) return refused("token.payload.exp", "", "missing \"exp\" claim");
  auto exp = numeric_date(*exp_it);
  if (!exp) return refused("token.payload.exp", dump(*exp_it), "exp is not a NumericDate (seconds since 1970)");
  const Time expires_at{Duration{*exp}};
  if (expires_at <= now - options_.leeway) {  // exp + leeway <= now
    return refused("token.payload.exp", std::to_string(*exp),
                   fmt::format("token expired at {} (now {}, leeway {}s)", format_rfc3339(expires_at),
                               format_rfc3339(now), options_.leeway.count()));
  }
  if (auto nbf_it = claims->find("nbf"); nbf_it != claims->end()) {
    auto nbf = numeric_date(*nbf_it);
    if (!nbf) return refused("token.payload.nbf", dump(*nbf_it), "nbf is not a NumericDate (seconds since 1970)");
    const Time not_before{Duration{*nbf}};
    if (not_before > now + options_.leeway) {  // nbf - leeway > now
      return refused("token.payload.nbf", std::to_string(*nbf),
                     fmt::format("token not yet valid: nbf {} (now {}, leeway {}s)", format_rfc3339(not_before),
                                 format_rfc3339(now), options_.leeway.count()));
    }
  }

  auto aud_it = claims->find("aud");
  if (aud_it == claims->end()) return refused("token.payload.aud", "", "missing \"aud\" claim");
  bool audience_found = false;
  if (aud_it->is_string()) {
    audience_found = aud_it->get<std::string>() == options_.audience;
  } else if (aud_it->is_array()) {
    for (const Json& a : *aud_it) {
      if (!a.is_string()) return refused("token.payload.aud", dump(*aud_it), "aud must hold only strings");
      audience_found = audience_found || a.get<std::string>() == options_.audience;
    }
  } else {
    return refused("token.payload.aud", dump(*aud_it), "aud must be a string or an array of strings");
  }
  if (!audience_found) {
    return refused("token.payload.aud", dump(*aud_it), fmt::format("aud does not include \"{}\"", options_.audience));
  }

  Principal principal;
  auto sub_it = claims->find("sub");
  if (sub_it == claims->end() || !sub_it->is_string() || sub_it->get<std::string>().empty()) {
    return refused("token.payload.sub", "", "missing \"sub\" claim, or not a non-empty string");
  }
  principal.subject = sub_it->get<std::string>();
  if (auto jti_it = claims->find("jti"); jti_it != claims->end()) {
    if (!jti_it->is_string()) return refused("token.payload.jti", dump(*jti_it), "jti must be a string");
    principal.token_id = jti_it->get<std::string>();
  }
  if (auto project_it = claims->find("cnlab.project"); project_it != claims->end()) {
    if (!project_it->is_string()) {
      return refused("token.payload.cnlab.project", dump(*project_it), "cnlab.project must be a string");
    }
    principal.project = project_it->get<std::string>();
  }
  principal.issuer = iss;
  principal.expires_at = expires_at;
  return principal;
}

Status JwtVerifier::check_signature(Alg alg, const Json& header, std::string_view signing_input,
                                    std::string_view signature_b64) const {
  auto signature = base64url_decode(signature_b64);
  if (!signature) return refused("token.signature", "", "not base64url: " + signature.error().message);
  bool ok = false;
  if (alg == Alg::kHs256) {
    ok = detail::constant_time_equal(detail::hmac_sha256(options_.hs256_secret, signing_input), *signature);
  } else {
    auto key = pick_key(alg, header);
    if (!key) return key.error();
    if (alg == Alg::kEs256) {
      if (signature->size() != 64) {
        return refused("token.signature", "",
                       fmt::format("ES256 signature must be 64 bytes (r||s), got {}", signature->size()));
      }
      ok = detail::verify_es256((*key)->key.get(), signing_input, *signature);
    } else {
      ok = detail::verify_rs256((*key)->key.get(), signing_input, *signature);
    }
  }
  if (!ok) return refused("token.signature", "", fmt::format("bad signature ({})", name_of(alg)));
  return Status::ok();
}

Result<const Jwk*> JwtVerifier::pick_key(Alg alg, const Json& header) const {
  const Family family = family_of(alg);
  auto kid_it = header.find("kid");
  if (kid_it != header.end()) {
    if (!kid_it->is_string()) return refused("token.header.kid", dump(*kid_it), "kid must be a string");
    const std::string kid = kid_it->get<std::string>();
    auto key = std::find_if(keys_.keys.begin(), keys_.keys.end(), [&](const Jwk& k) { return k.kid == kid; });
    if (key == keys_.keys.end()) {
      auto skipped = keys_.skipped.find(kid);
      if (skipped != keys_.skipped.end()) {
        return refused("token.header.kid", kid, "unknown kid: the JWKS key with this kid is not used because " +
                                                    skipped->second);
      }
      return refused("token.header.kid", kid, "unknown kid: the JWKS has no key with this kid");
    }
    if (key->family != family) {
      return refused("token.header.kid", kid,
                     fmt::format("kid names an {} key, which cannot verify {}", name_of(key->family), name_of(alg)));
    }
    return &*key;
  }
  const Jwk* only = nullptr;
  size_t count = 0;
  for (const Jwk& k : keys_.keys) {
    if (k.family != family) continue;
    only = &k;
    ++count;
  }
  if (count != 1) {
    return refused("token.header.kid", "",
                   fmt::format("token has no kid and the JWKS has {} {} keys; a kid is needed to choose one", count,
                               name_of(family)));
  }
  return only;
}

}  // namespace

Result<std::unique_ptr<Verifier>> Verifier::create(const VerifierOptions& options) {
  if (options.own_issuer.empty()) return Error::invalid_argument("own_issuer", "", "must not be empty");
  if (options.audience.empty()) return Error::invalid_argument("audience", "", "must not be empty");
  if (!options.hs256_secret.empty() && options.hs256_secret.size() < kMinSecretBytes) {
    return Error::invalid_argument("hs256_secret", fmt::format("({} bytes)", options.hs256_secret.size()),
                                   fmt::format("must be at least {} bytes (RFC 7518 section 3.2), or empty to "
                                               "disable HS256",
                                               kMinSecretBytes));
  }
  if (options.leeway < std::chrono::seconds{0} || options.leeway > kMaxLeeway) {
    return Error::invalid_argument("leeway", std::to_string(options.leeway.count()) + "s", "must be 0s..1d");
  }
  if (options.max_token_bytes == 0) return Error::invalid_argument("max_token_bytes", "0", "must be positive");

  KeySet keys;
  if (!options.jwks_file.empty()) {
    if (options.external_issuer.empty()) {
      return Error::invalid_argument("external_issuer", "", "required when jwks_file is set");
    }
    if (options.external_issuer == options.own_issuer) {
      return Error::invalid_argument("external_issuer", options.external_issuer,
                                     "must differ from own_issuer: the issuer decides which algorithm a token "
                                     "must use");
    }
    auto loaded = load_jwks(options.jwks_file);
    if (!loaded) return loaded.error();
    keys = std::move(*loaded);
  } else if (!options.external_issuer.empty()) {
    return Error::invalid_argument("jwks_file", "", "required when external_issuer is set");
  }
  return std::unique_ptr<Verifier>(new JwtVerifier(options, std::move(keys)));
}

std::string mint_hs256(const MintRequest& request, const VerifierOptions& options, Time now) {
  CNLAB_CHECK_MSG(!options.hs256_secret.empty(), "mint_hs256 needs VerifierOptions::hs256_secret");
  const int64_t iat = now.time_since_epoch().count();
  Json claims = {
      {"iss", options.own_issuer},
      {"aud", options.audience},
      {"sub", request.subject},
      {"jti", request.token_id.empty() ? random_hex(16) : request.token_id},
      {"iat", iat},
      {"nbf", iat},
      {"exp", iat + request.ttl.count()},
  };
  if (!request.project.empty()) claims["cnlab.project"] = request.project;
  std::string signing_input =
      base64url_encode(R"({"alg":"HS256","typ":"JWT"})") + "." + base64url_encode(dump(claims));
  std::string signature = detail::hmac_sha256(options.hs256_secret, signing_input);
  CNLAB_CHECK_MSG(signature.size() == 32, "HMAC-SHA256 failed");
  return signing_input + "." + base64url_encode(signature);
}

}  // namespace cnlab::auth
