// Attacks on the verifier. Every refusal test checks the reason, so that it fails if the check it
// names were missing (a token refused for some other reason does not pass it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/buffer.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "auth/auth.h"

namespace cnlab::auth {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kT = 1'800'000'000;  // 2027-01-15T08:00:00Z
const Time kNow{Duration{kT}};
const std::string kSecret = "0123456789abcdef0123456789abcdef-server-secret";
const std::string kIdp = "https://idp.example.com";

// ---- a test-only signer, straight over OpenSSL EVP ---------------------------------------------

struct PKeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using PKey = std::unique_ptr<EVP_PKEY, PKeyFree>;

const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

std::string big_endian(EVP_PKEY* key, const char* param, int width = 0) {
  BIGNUM* bn = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(key, param, &bn), 1) << param;
  int size = width > 0 ? width : BN_num_bytes(bn);
  std::string out(static_cast<size_t>(size), '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), size);
  BN_free(bn);
  return out;
}

// SHA-256 signature by `key`: PKCS#1 v1.5 for RSA, DER ECDSA-Sig-Value for EC.
std::string evp_sign(EVP_PKEY* key, std::string_view data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  EXPECT_EQ(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key), 1);
  EXPECT_EQ(EVP_DigestSign(ctx, nullptr, &len, bytes_of(data), data.size()), 1);
  std::string sig(len, '\0');
  EXPECT_EQ(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len, bytes_of(data), data.size()), 1);
  sig.resize(len);
  EVP_MD_CTX_free(ctx);
  return sig;
}

// DER ECDSA-Sig-Value -> the JWS form r||s, 32 bytes each.
std::string der_to_jws(std::string_view der) {
  const unsigned char* p = bytes_of(der);
  ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size()));
  EXPECT_NE(sig, nullptr);
  const BIGNUM* r = nullptr;
  const BIGNUM* s = nullptr;
  ECDSA_SIG_get0(sig, &r, &s);
  std::string out(64, '\0');
  BN_bn2binpad(r, reinterpret_cast<unsigned char*>(out.data()), 32);
  BN_bn2binpad(s, reinterpret_cast<unsigned char*>(out.data()) + 32, 32);
  ECDSA_SIG_free(sig);
  return out;
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXPECT_NE(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), bytes_of(data), data.size(), out, &len),
            nullptr);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string public_pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  EXPECT_EQ(PEM_write_bio_PUBKEY(bio, key), 1);
  BUF_MEM* mem = nullptr;
  BIO_get_mem_ptr(bio, &mem);
  std::string pem(mem->data, mem->length);
  BIO_free(bio);
  return pem;
}

Json rsa_jwk(EVP_PKEY* key, const std::string& kid) {
  return {{"kty", "RSA"}, {"kid", kid}, {"alg", "RS256"}, {"use", "sig"},
          {"n", base64url_encode(big_endian(key, OSSL_PKEY_PARAM_RSA_N))},
          {"e", base64url_encode(big_endian(key, OSSL_PKEY_PARAM_RSA_E))}};
}

Json ec_jwk(EVP_PKEY* key, const std::string& kid) {
  return {{"kty", "EC"}, {"kid", kid}, {"crv", "P-256"},
          {"x", base64url_encode(big_endian(key, OSSL_PKEY_PARAM_EC_PUB_X, 32))},
          {"y", base64url_encode(big_endian(key, OSSL_PKEY_PARAM_EC_PUB_Y, 32))}};
}

// ---- tokens -------------------------------------------------------------------------------------

using Signer = std::function<std::string(std::string_view signing_input)>;

std::string make_token(const Json& header, const Json& claims, const Signer& sign) {
  std::string input = base64url_encode(header.dump()) + "." + base64url_encode(claims.dump());
  return input + "." + base64url_encode(sign(input));
}

Json claims_for(const std::string& iss) {
  return {{"iss", iss},     {"aud", "cnlab"},  {"sub", "alice"},     {"jti", "tok-1"},
          {"iat", kT - 60}, {"nbf", kT - 60}, {"exp", kT + 3600}, {"cnlab.project", "vision"}};
}

struct Parts {
  std::string header, payload, signature;  // still base64url
};

Parts split_token(const std::string& token) {
  size_t a = token.find('.');
  size_t b = token.find('.', a + 1);
  return {token.substr(0, a), token.substr(a + 1, b - a - 1), token.substr(b + 1)};
}

std::string join_parts(const Parts& p) { return p.header + "." + p.payload + "." + p.signature; }

::testing::AssertionResult Refused(const Result<Principal>& result, std::string_view why) {
  if (result) return ::testing::AssertionFailure() << "token verified, subject \"" << result->subject << "\"";
  const Error& e = result.error();
  if (e.code != ErrorCode::kUnauthenticated) {
    return ::testing::AssertionFailure() << "code " << to_string(e.code) << ": " << e.to_string();
  }
  if (e.to_string().find(why) == std::string::npos) {
    return ::testing::AssertionFailure() << "refused, but not for \"" << why << "\": " << e.to_string();
  }
  return ::testing::AssertionSuccess();
}

class JwtTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rsa_.reset(EVP_RSA_gen(2048));
    other_rsa_.reset(EVP_RSA_gen(2048));
    ec_.reset(EVP_EC_gen("P-256"));
    ASSERT_TRUE(rsa_ && other_rsa_ && ec_);
  }
  static void TearDownTestSuite() {
    rsa_.reset();
    other_rsa_.reset();
    ec_.reset();
  }

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cnlab-auth-test-" + random_hex(8));
    fs::create_directories(dir_);
    jwks_path_ = write_file("jwks.json", Json{{"keys", {rsa_jwk(rsa_.get(), "rsa-1"), ec_jwk(ec_.get(), "ec-1")}}}.dump());
    options_ = {.hs256_secret = kSecret, .jwks_file = jwks_path_, .external_issuer = kIdp};
    verifier_ = make_verifier(options_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_file(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  static std::unique_ptr<Verifier> make_verifier(const VerifierOptions& options) {
    auto v = Verifier::create(options);
    EXPECT_TRUE(v) << (v ? "" : v.error().to_string());
    return v ? std::move(*v) : nullptr;
  }

  Result<Principal> verify(std::string_view token) const { return verifier_->verify(token, kNow); }

  static std::string hs256(const Json& claims, const std::string& secret = kSecret,
                           const Json& header = {{"alg", "HS256"}, {"typ", "JWT"}}) {
    return make_token(header, claims, [&](std::string_view in) { return hmac(secret, in); });
  }
  static std::string rs256(const Json& claims, const Json& header = {{"alg", "RS256"}, {"kid", "rsa-1"}},
                           EVP_PKEY* key = nullptr) {
    EVP_PKEY* k = key ? key : rsa_.get();
    return make_token(header, claims, [&](std::string_view in) { return evp_sign(k, in); });
  }
  static std::string es256(const Json& claims, const Json& header = {{"alg", "ES256"}, {"kid", "ec-1"}}) {
    return make_token(header, claims, [&](std::string_view in) { return der_to_jws(evp_sign(ec_.get(), in)); });
  }

  inline static PKey rsa_;
  inline static PKey other_rsa_;
  inline static PKey ec_;
  fs::path dir_;
  std::string jwks_path_;
  VerifierOptions options_;
  std::unique_ptr<Verifier> verifier_;
};

// ---- accepted ----------------------------------------------------------------------------------

TEST_F(JwtTest, MintedHs256TokenVerifiesWithItsClaims) {
  std::string token = mint_hs256({.subject = "alice", .project = "vision", .token_id = "tok-7", .ttl = kHour},
                                 options_, kNow);
  auto principal = verify(token);
  ASSERT_TRUE(principal) << principal.error().to_string();
  EXPECT_EQ(principal->subject, "alice");
  EXPECT_EQ(principal->token_id, "tok-7");
  EXPECT_EQ(principal->issuer, "cnlab");
  EXPECT_EQ(principal->project, "vision");
  EXPECT_EQ(principal->expires_at, kNow + kHour);
  EXPECT_FALSE(principal->is_node());
}

TEST_F(JwtTest, MintWritesTheDocumentedHeaderAndClaims) {
  std::string token = mint_hs256({.subject = "node:gpu-12", .ttl = kDay}, options_, kNow);
  Parts parts = split_token(token);
  EXPECT_EQ(*base64url_decode(parts.header), R"({"alg":"HS256","typ":"JWT"})");
  Json claims = Json::parse(*base64url_decode(parts.payload));
  EXPECT_EQ(claims["iss"], "cnlab");
  EXPECT_EQ(claims["aud"], "cnlab");
  EXPECT_EQ(claims["sub"], "node:gpu-12");
  EXPECT_EQ(claims["iat"], kT);
  EXPECT_EQ(claims["nbf"], kT);
  EXPECT_EQ(claims["exp"], kT + 86400);
  EXPECT_FALSE(claims.contains("cnlab.project"));
  EXPECT_EQ(*base64url_decode(parts.signature), hmac(kSecret, parts.header + "." + parts.payload));
  auto principal = verify(token);
  ASSERT_TRUE(principal);
  EXPECT_TRUE(principal->is_node());
}

TEST_F(JwtTest, MintMakesARandomTokenIdWhenNoneIsGiven) {
  auto a = verify(mint_hs256({.subject = "alice"}, options_, kNow));
  auto b = verify(mint_hs256({.subject = "alice"}, options_, kNow));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->token_id.size(), 32u);
  EXPECT_EQ(a->token_id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a->token_id, b->token_id);
}

TEST_F(JwtTest, Rs256TokenFromTheJwksVerifies) {
  auto principal = verify(rs256(claims_for(kIdp)));
  ASSERT_TRUE(principal) << principal.error().to_string();
  EXPECT_EQ(principal->subject, "alice");
  EXPECT_EQ(principal->token_id, "tok-1");
  EXPECT_EQ(principal->issuer, kIdp);
  EXPECT_EQ(principal->project, "vision");
  EXPECT_EQ(principal->expires_at, kNow + kHour);
}

TEST_F(JwtTest, Es256TokenFromTheJwksVerifies) {
  auto principal = verify(es256(claims_for(kIdp)));
  ASSERT_TRUE(principal) << principal.error().to_string();
  EXPECT_EQ(principal->subject, "alice");
  EXPECT_EQ(principal->issuer, kIdp);
  EXPECT_EQ(principal->expires_at, kNow + kHour);
}

TEST_F(JwtTest, AudienceArrayContainingTheAudienceIsAccepted) {
  Json claims = claims_for("cnlab");
  claims["aud"] = {"billing", "cnlab"};
  EXPECT_TRUE(verify(hs256(claims)));
  claims = claims_for(kIdp);
  claims["aud"] = {"cnlab"};
  EXPECT_TRUE(verify(rs256(claims)));
}

TEST_F(JwtTest, TokenWithoutKidUsesTheOnlyKeyOfItsFamily) {
  EXPECT_TRUE(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}})));
  EXPECT_TRUE(verify(es256(claims_for(kIdp), {{"alg", "ES256"}})));
}

// ---- alg none and unknown algorithms -------------------------------------------------------------

TEST_F(JwtTest, AlgNoneWithEmptySignatureIsRefused) {
  for (const std::string& iss : {std::string("cnlab"), kIdp}) {
    std::string token =
        base64url_encode(Json{{"alg", "none"}, {"typ", "JWT"}}.dump()) + "." + base64url_encode(claims_for(iss).dump()) + ".";
    EXPECT_TRUE(Refused(verify(token), "alg \"none\" is refused")) << iss;
  }
}

TEST_F(JwtTest, AlgNoneInAnyCaseIsRefused) {
  for (const char* alg : {"None", "nOnE", "NONE", "none"}) {
    Json header = {{"alg", alg}};
    std::string empty_sig =
        base64url_encode(header.dump()) + "." + base64url_encode(claims_for("cnlab").dump()) + ".";
    EXPECT_TRUE(Refused(verify(empty_sig), "\"none\" is refused")) << alg;
    // Even with a correct HMAC of the server's secret: "none" never means "HS256".
    EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret, header)), "\"none\" is refused")) << alg;
  }
}

TEST_F(JwtTest, AlgorithmsOtherThanTheThreeAreRefused) {
  // Each is HMAC-signed with the server's secret, so a verifier that took any "HS*" or any case of
  // "HS256" as HS256 would accept it.
  for (const char* alg : {"hs256", "Hs256", "HS384", "HS512", "RS384", "PS256", "ES384", "EdDSA", "HS256 ", ""}) {
    EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret, {{"alg", alg}})), "unsupported alg")) << alg;
  }
  EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret, {{"typ", "JWT"}})), "token.header.alg"));
  EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret, {{"alg", 256}})), "token.header.alg"));
}

TEST_F(JwtTest, CritHeaderIsRefused) {
  Json header = {{"alg", "HS256"}, {"crit", {"exp"}}, {"exp", kT + 10}};
  EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret, header)), "\"crit\""));
  header = {{"alg", "RS256"}, {"kid", "rsa-1"}, {"crit", Json::array()}};
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), header)), "\"crit\""));
}

// ---- algorithm confusion ---------------------------------------------------------------------------

TEST_F(JwtTest, Hs256SignedWithTheRsaPublicKeyPemClaimingTheExternalIssuerIsRefused) {
  const std::string pem = public_pem(rsa_.get());
  ASSERT_THAT(pem, StartsWith("-----BEGIN PUBLIC KEY-----"));
  std::string forged = hs256(claims_for(kIdp), pem);
  EXPECT_TRUE(Refused(verify(forged), "algorithm confusion"));

  // Against a verifier where the PEM really is the HMAC key, only the issuer/alg binding stands
  // between the forgery and acceptance: the same key minting for its own issuer does verify.
  VerifierOptions options = options_;
  options.hs256_secret = pem;
  auto confused = make_verifier(options);
  ASSERT_TRUE(confused);
  ASSERT_TRUE(confused->verify(hs256(claims_for("cnlab"), pem), kNow));
  EXPECT_TRUE(Refused(confused->verify(forged, kNow), "algorithm confusion"));
}

TEST_F(JwtTest, Hs256SignedWithTheJwkModulusIsRefused) {
  const std::string n_bytes = big_endian(rsa_.get(), OSSL_PKEY_PARAM_RSA_N);
  const Json jwk = rsa_jwk(rsa_.get(), "rsa-1");
  for (const std::string& secret : {n_bytes, jwk["n"].get<std::string>(), jwk.dump()}) {
    std::string forged = hs256(claims_for(kIdp), secret);
    EXPECT_TRUE(Refused(verify(forged), "algorithm confusion"));
    VerifierOptions options = options_;
    options.hs256_secret = secret;
    auto confused = make_verifier(options);
    ASSERT_TRUE(confused);
    EXPECT_TRUE(Refused(confused->verify(forged, kNow), "algorithm confusion"));
  }
}

TEST_F(JwtTest, Rs256AndEs256TokensClaimingTheOwnIssuerAreRefused) {
  // Correctly signed by JWKS keys: only the issuer/alg binding refuses them.
  EXPECT_TRUE(Refused(verify(rs256(claims_for("cnlab"))), "algorithm confusion"));
  EXPECT_TRUE(Refused(verify(es256(claims_for("cnlab"))), "algorithm confusion"));
}

TEST_F(JwtTest, Rs256AndEs256TokensWithoutAJwksAreRefused) {
  auto hs_only = make_verifier({.hs256_secret = kSecret});
  ASSERT_TRUE(hs_only);
  EXPECT_TRUE(Refused(hs_only->verify(rs256(claims_for(kIdp)), kNow), "no JWKS"));
  EXPECT_TRUE(Refused(hs_only->verify(es256(claims_for(kIdp)), kNow), "no JWKS"));
  EXPECT_TRUE(Refused(hs_only->verify(rs256(claims_for("cnlab")), kNow), "no JWKS"));
}

TEST_F(JwtTest, Hs256WithoutAServerSecretIsRefused) {
  auto jwks_only = make_verifier({.jwks_file = jwks_path_, .external_issuer = kIdp});
  ASSERT_TRUE(jwks_only);
  EXPECT_TRUE(Refused(jwks_only->verify(hs256(claims_for("cnlab")), kNow), "HS256 is not enabled"));
  EXPECT_TRUE(jwks_only->verify(rs256(claims_for(kIdp)), kNow));
}

// ---- signatures --------------------------------------------------------------------------------

TEST_F(JwtTest, FlippedSignatureByteIsRefused) {
  for (const std::string& token : {hs256(claims_for("cnlab")), rs256(claims_for(kIdp)), es256(claims_for(kIdp))}) {
    ASSERT_TRUE(verify(token));
    for (size_t at : {size_t{0}, size_t{5}, size_t{31}}) {
      Parts parts = split_token(token);
      std::string sig = *base64url_decode(parts.signature);
      sig[at] = static_cast<char>(sig[at] ^ 0x01);
      parts.signature = base64url_encode(sig);
      EXPECT_TRUE(Refused(verify(join_parts(parts)), "bad signature")) << token.substr(0, 20) << " byte " << at;
    }
  }
}

TEST_F(JwtTest, TamperedPayloadIsRefused) {
  for (const std::string& token : {hs256(claims_for("cnlab")), rs256(claims_for(kIdp)), es256(claims_for(kIdp))}) {
    Parts parts = split_token(token);
    Json claims = Json::parse(*base64url_decode(parts.payload));
    claims["sub"] = "root";
    parts.payload = base64url_encode(claims.dump());
    EXPECT_TRUE(Refused(verify(join_parts(parts)), "bad signature"));
  }
}

TEST_F(JwtTest, TokenSignedWithAnotherSecretOrKeyIsRefused) {
  EXPECT_TRUE(Refused(verify(hs256(claims_for("cnlab"), kSecret + "x")), "bad signature"));
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rsa-1"}}, other_rsa_.get())),
                      "bad signature"));
}

TEST_F(JwtTest, NonCanonicalSignatureEncodingIsRefused) {
  // A 32-byte HMAC is 43 characters; the last one carries 2 unused bits. Setting them gives a
  // second spelling of the same bytes, which a lax decoder would accept.
  std::string token = hs256(claims_for("cnlab"));
  Parts parts = split_token(token);
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  size_t last = alphabet.find(parts.signature.back());
  ASSERT_EQ(last % 4, 0u);
  parts.signature.back() = alphabet[last + 1];
  EXPECT_TRUE(Refused(verify(join_parts(parts)), "not canonical"));
}

TEST_F(JwtTest, UnknownKidIsRefused) {
  // Signed by the JWKS key itself: a verifier that fell back to "any key" would accept it.
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rsa-2"}})), "unknown kid"));
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rsa-2"}}, other_rsa_.get())),
                      "unknown kid"));
  EXPECT_TRUE(Refused(verify(es256(claims_for(kIdp), {{"alg", "ES256"}, {"kid", ""}})), "unknown kid"));
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", 1}})), "kid must be a string"));
}

TEST_F(JwtTest, KidOfAnotherKeyTypeIsRefused) {
  EXPECT_TRUE(Refused(verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "ec-1"}})), "cannot verify RS256"));
  EXPECT_TRUE(Refused(verify(es256(claims_for(kIdp), {{"alg", "ES256"}, {"kid", "rsa-1"}})), "cannot verify ES256"));
}

TEST_F(JwtTest, TokenWithoutKidIsRefusedWhenTheJwksHasTwoKeysOfItsFamily) {
  std::string path = write_file("two.json", Json{{"keys", {rsa_jwk(rsa_.get(), "rsa-1"),
                                                           rsa_jwk(other_rsa_.get(), "rsa-2")}}}.dump());
  auto two = make_verifier({.jwks_file = path, .external_issuer = kIdp});
  ASSERT_TRUE(two);
  EXPECT_TRUE(Refused(two->verify(rs256(claims_for(kIdp), {{"alg", "RS256"}}), kNow), "has no kid"));
  EXPECT_TRUE(two->verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rsa-1"}}), kNow));
  EXPECT_TRUE(two->verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rsa-2"}}, other_rsa_.get()), kNow));
  // No EC key at all in this JWKS.
  EXPECT_TRUE(Refused(two->verify(es256(claims_for(kIdp), {{"alg", "ES256"}}), kNow), "has no kid"));
}

TEST_F(JwtTest, Es256SignatureOfAnyLengthBut64IsRefused) {
  std::string der_token = make_token({{"alg", "ES256"}, {"kid", "ec-1"}}, claims_for(kIdp),
                                     [](std::string_view in) { return evp_sign(ec_.get(), in); });
  std::string der = *base64url_decode(split_token(der_token).signature);
  ASSERT_NE(der.size(), 64u);
  EXPECT_TRUE(Refused(verify(der_token), "must be 64 bytes"));

  Parts parts = split_token(es256(claims_for(kIdp)));
  std::string raw = *base64url_decode(parts.signature);
  for (const std::string& sig : {raw.substr(0, 63), raw + '\0', std::string(1, '\0') + raw, std::string()}) {
    parts.signature = base64url_encode(sig);
    EXPECT_TRUE(Refused(verify(join_parts(parts)), "must be 64 bytes")) << sig.size();
  }
}

TEST_F(JwtTest, Rs256SignatureOfTheWrongLengthIsRefused) {
  Parts parts = split_token(rs256(claims_for(kIdp)));
  std::string sig = *base64url_decode(parts.signature);
  for (const std::string& bad : {sig.substr(1), std::string(1, '\0') + sig, std::string()}) {
    parts.signature = base64url_encode(bad);
    EXPECT_TRUE(Refused(verify(join_parts(parts)), "bad signature")) << bad.size();
  }
}

// ---- time ----------------------------------------------------------------------------------------

TEST_F(JwtTest, ExpiredBeyondLeewayIsRefusedButWithinLeewayAccepted) {
  Json claims = claims_for("cnlab");
  claims["exp"] = kT - 30;  // exp + leeway == now
  EXPECT_TRUE(Refused(verify(hs256(claims)), "expired"));
  claims["exp"] = kT - 3600;
  EXPECT_TRUE(Refused(verify(hs256(claims)), "expired"));
  EXPECT_TRUE(Refused(verify(rs256([&] { Json c = claims_for(kIdp); c["exp"] = kT - 31; return c; }())), "expired"));
  claims["exp"] = kT - 29;
  auto within = verify(hs256(claims));
  ASSERT_TRUE(within) << within.error().to_string();
  EXPECT_EQ(within->expires_at, kNow - Duration{29});
}

TEST_F(JwtTest, NotBeforeInTheFutureIsRefusedButWithinLeewayAccepted) {
  Json claims = claims_for("cnlab");
  claims["nbf"] = kT + 31;
  EXPECT_TRUE(Refused(verify(hs256(claims)), "not yet valid"));
  claims["nbf"] = kT + 30;
  EXPECT_TRUE(verify(hs256(claims)));
  claims["nbf"] = "soon";
  EXPECT_TRUE(Refused(verify(hs256(claims)), "nbf is not a NumericDate"));
}

TEST_F(JwtTest, MissingOrNonNumericExpIsRefused) {
  Json claims = claims_for("cnlab");
  claims.erase("exp");
  EXPECT_TRUE(Refused(verify(hs256(claims)), "missing \"exp\""));
  for (const Json& exp : {Json("1900000000"), Json(true), Json(nullptr), Json::array({kT + 10}), Json(1e300),
                          Json(-5), Json(18446744073709551615ull)}) {
    claims["exp"] = exp;
    EXPECT_TRUE(Refused(verify(hs256(claims)), "exp is not a NumericDate")) << exp.dump();
  }
  claims["exp"] = static_cast<double>(kT) + 100.5;  // a fractional NumericDate is fine
  EXPECT_TRUE(verify(hs256(claims)));
}

// ---- iss, aud, sub -------------------------------------------------------------------------------

TEST_F(JwtTest, WrongOrMissingIssuerIsRefused) {
  Json claims = claims_for("cnlab");
  for (const Json& iss : {Json("evil"), Json("CNLAB"), Json(""), Json(7)}) {
    claims["iss"] = iss;
    EXPECT_TRUE(Refused(verify(hs256(claims)), "token.payload.iss")) << iss.dump();
  }
  claims.erase("iss");
  EXPECT_TRUE(Refused(verify(hs256(claims)), "missing \"iss\""));
  // Without a JWKS, the outside issuer is not accepted at all.
  auto hs_only = make_verifier({.hs256_secret = kSecret});
  EXPECT_TRUE(Refused(hs_only->verify(hs256(claims_for(kIdp)), kNow), "not an accepted issuer"));
  EXPECT_TRUE(Refused(verify(rs256(claims_for("https://other-idp.example.com"))), "not an accepted issuer"));
}

TEST_F(JwtTest, WrongOrMissingAudienceIsRefused) {
  Json claims = claims_for("cnlab");
  for (const Json& aud : {Json("billing"), Json("CNLAB"), Json::array({"billing", "ops"}), Json::array()}) {
    claims["aud"] = aud;
    EXPECT_TRUE(Refused(verify(hs256(claims)), "aud does not include \"cnlab\"")) << aud.dump();
  }
  claims["aud"] = 42;
  EXPECT_TRUE(Refused(verify(hs256(claims)), "aud must be a string or an array"));
  claims["aud"] = {"cnlab", 7};
  EXPECT_TRUE(Refused(verify(hs256(claims)), "aud must hold only strings"));
  claims.erase("aud");
  EXPECT_TRUE(Refused(verify(hs256(claims)), "missing \"aud\""));
  Json idp_claims = claims_for(kIdp);
  idp_claims["aud"] = "billing";
  EXPECT_TRUE(Refused(verify(es256(idp_claims)), "aud does not include"));
}

TEST_F(JwtTest, MissingSubjectIsRefused) {
  Json claims = claims_for("cnlab");
  for (const Json& sub : {Json(""), Json(5), Json(nullptr)}) {
    claims["sub"] = sub;
    EXPECT_TRUE(Refused(verify(hs256(claims)), "token.payload.sub")) << sub.dump();
  }
  claims.erase("sub");
  EXPECT_TRUE(Refused(verify(hs256(claims)), "missing \"sub\""));
}

// ---- size and shape ------------------------------------------------------------------------------

TEST_F(JwtTest, OversizedTokenIsRefusedBeforeParsing) {
  Json claims = claims_for("cnlab");
  claims["pad"] = std::string(9000, 'x');
  std::string big = hs256(claims);
  ASSERT_GT(big.size(), options_.max_token_bytes);
  EXPECT_TRUE(Refused(verify(big), "over the limit of 8192"));
  EXPECT_TRUE(Refused(verify(std::string(8193, '.')), "over the limit"));  // not even split

  VerifierOptions roomy = options_;
  roomy.max_token_bytes = 1 << 16;
  EXPECT_TRUE(make_verifier(roomy)->verify(big, kNow));
}

TEST_F(JwtTest, MalformedTokensAreRefused) {
  const std::string good = hs256(claims_for("cnlab"));
  const Parts p = split_token(good);
  const std::string h = p.header;
  const std::string c = p.payload;
  const std::string s = p.signature;
  const std::string b = base64url_encode(Json{{"alg", "HS256"}}.dump());
  struct Case {
    std::string token;
    std::string why;
  };
  const Case cases[] = {
      {"", "three base64url parts"},
      {"abc", "three base64url parts"},
      {h + "." + c, "three base64url parts"},
      {good + ".", "three base64url parts"},
      {good + "." + s, "three base64url parts"},
      {"..", "token.header"},
      {"!!!." + c + "." + s, "token.header \"\": not base64url"},
      {h + "=." + c + "." + s, "token.header \"\": not base64url"},
      {std::string(h).insert(4, 1, '\0') + "." + c + "." + s, "not base64url"},
      {base64url_encode("hello") + "." + c + "." + s, "token.header \"hello\": not a JSON object"},
      {base64url_encode("[1,2]") + "." + c + "." + s, "not a JSON object"},
      {base64url_encode("\"HS256\"") + "." + c + "." + s, "not a JSON object"},
      {base64url_encode("\xff\xfe{}") + "." + c + "." + s, "not a JSON object"},
      {base64url_encode(R"({"alg":"HS256")") + "." + c + "." + s, "not a JSON object"},
      {h + ".." + s, "token.payload"},
      {h + ".%%%." + s, "token.payload \"\": not base64url"},
      {h + "." + base64url_encode("not json") + "." + s, "token.payload \"\": not a JSON object"},
      {h + "." + base64url_encode("[]") + "." + s, "token.payload \"\": not a JSON object"},
      {h + "." + c + ".", "bad signature"},
      {h + "." + c + ".ab+/", "token.signature \"\": not base64url"},
      {h + "." + c + "." + s + "=", "token.signature \"\": not base64url"},
      {h + "." + c + "." + s.substr(0, 40), "bad signature"},  // 30 bytes, not 32
      {b + "." + c + ".x", "token.signature \"\": not base64url"},
  };
  for (const Case& k : cases) {
    EXPECT_TRUE(Refused(verify(k.token), k.why)) << "token: " << k.token;
  }
}

TEST_F(JwtTest, RandomMutationsOfValidTokensNeverVerifyAndNeverCrash) {
  const std::string tokens[] = {hs256(claims_for("cnlab")), rs256(claims_for(kIdp)), es256(claims_for(kIdp))};
  for (const std::string& t : tokens) ASSERT_TRUE(verify(t));
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ";
  std::mt19937 rng(20261130);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int verified = 0;
  int tried = 0;
  for (int round = 0; round < 4000; ++round) {
    const std::string& original = tokens[round % 3];
    std::string t = original;
    int edits = 1 + static_cast<int>(pick(3));
    for (int e = 0; e < edits && !t.empty(); ++e) {
      switch (pick(8)) {
        case 0: t[pick(t.size())] = static_cast<char>(pick(256)); break;
        case 1: t[pick(t.size())] = alphabet[pick(alphabet.size())]; break;
        case 2: t.insert(pick(t.size() + 1), 1, alphabet[pick(alphabet.size())]); break;
        case 3: t.erase(pick(t.size()), 1); break;
        case 4: std::swap(t[pick(t.size())], t[pick(t.size())]); break;
        case 5: t.resize(pick(t.size())); break;
        case 6: {
          size_t from = pick(t.size());
          t.insert(pick(t.size() + 1), t.substr(from, pick(40)));
          break;
        }
        default: {
          char& ch = t[pick(t.size())];
          ch = static_cast<char>(std::isupper(static_cast<unsigned char>(ch)) ? std::tolower(ch) : std::toupper(ch));
        }
      }
    }
    if (t == original) continue;
    ++tried;
    if (verifier_->verify(t, kNow)) {
      ++verified;
      ADD_FAILURE() << "mutated token verified: " << t;
    }
  }
  for (int round = 0; round < 1000; ++round) {  // pure noise, some of it shaped like a JWS
    std::string t(pick(300), '\0');
    for (char& ch : t) ch = round % 2 ? static_cast<char>(pick(256)) : alphabet[pick(alphabet.size())];
    ++tried;
    if (verifier_->verify(t, kNow)) ++verified;
  }
  EXPECT_GT(tried, 4500);
  EXPECT_EQ(verified, 0);
}

// ---- JWKS loading and options --------------------------------------------------------------------

TEST_F(JwtTest, JwksErrorsNameTheFileAndThePath) {
  const Json good_rsa = rsa_jwk(rsa_.get(), "rsa-1");
  Json bad_n = good_rsa;
  bad_n["n"] = "@@@";
  Json no_e = good_rsa;
  no_e.erase("e");
  Json short_x = ec_jwk(ec_.get(), "ec-1");
  short_x["x"] = base64url_encode(std::string(31, '\x01'));
  Json off_curve = ec_jwk(ec_.get(), "ec-1");
  off_curve["x"] = base64url_encode(std::string(32, '\x01'));
  off_curve["y"] = base64url_encode(std::string(32, '\x02'));
  Json small_rsa = good_rsa;
  small_rsa["n"] = base64url_encode("\xc1" + std::string(127, '\x01'));  // 1024 bits
  struct Case {
    std::string text;
    std::string field;  // after "<file>: "
    std::string why;
  };
  const Case cases[] = {
      {"{\"keys\": [", "", "not valid JSON"},
      {"[]", "(document)", "expected a JSON object"},
      {"{}", "keys", "required field is missing"},
      {R"({"keys": {}})", "keys", "expected an array"},
      {Json{{"keys", {good_rsa, bad_n}}}.dump(), "keys[1].n", "not base64url"},
      {Json{{"keys", {no_e}}}.dump(), "keys[0].e", "required field is missing"},
      {Json{{"keys", {Json{{"kid", "k"}}}}}.dump(), "keys[0].kty", "required field is missing"},
      {Json{{"keys", {Json{{"kty", 3}}}}}.dump(), "keys[0].kty", "expected a string"},
      {Json{{"keys", {good_rsa, short_x}}}.dump(), "keys[1].x", "must be 32 bytes for P-256, got 31"},
      {Json{{"keys", {off_curve}}}.dump(), "keys[0]", "not a valid EC public key"},
      {Json{{"keys", {small_rsa}}}.dump(), "keys[0]", "RSA modulus of 1024 bits"},
      {Json{{"keys", {good_rsa, good_rsa}}}.dump(), "keys[1].kid", "duplicate kid"},
      {Json{{"keys", {Json{{"kty", "OKP"}, {"crv", "Ed25519"}, {"x", "AAAA"}}}}}.dump(), "keys",
       "no usable signing key"},
  };
  for (const Case& k : cases) {
    std::string path = write_file("case.json", k.text);
    auto v = Verifier::create({.jwks_file = path, .external_issuer = kIdp});
    ASSERT_FALSE(v) << k.text;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(v.error().field, k.field.empty() ? path : path + ": " + k.field) << v.error().to_string();
    EXPECT_THAT(v.error().message, HasSubstr(k.why)) << v.error().to_string();
  }
  std::string missing = (dir_ / "no-such.json").string();
  auto v = Verifier::create({.jwks_file = missing, .external_issuer = kIdp});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().field, missing);
  EXPECT_THAT(v.error().message, HasSubstr("cannot open the JWKS file"));
}

TEST_F(JwtTest, JwksKeysThisServerCannotUseAreSkippedAndNamedWhenAskedFor) {
  Json enc = rsa_jwk(other_rsa_.get(), "enc-1");
  enc["use"] = "enc";
  Json rs512 = rsa_jwk(other_rsa_.get(), "rs512-1");
  rs512["alg"] = "RS512";
  Json p384 = {{"kty", "EC"}, {"kid", "p384-1"}, {"crv", "P-384"}, {"x", "AAAA"}, {"y", "AAAA"}};
  std::string path = write_file("mixed.json", Json{{"keys", {enc, rs512, p384, rsa_jwk(rsa_.get(), "rsa-1")}}}.dump());
  auto mixed = make_verifier({.jwks_file = path, .external_issuer = kIdp});
  ASSERT_TRUE(mixed);
  EXPECT_TRUE(mixed->verify(rs256(claims_for(kIdp)), kNow));
  EXPECT_TRUE(Refused(
      mixed->verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "enc-1"}}, other_rsa_.get()), kNow),
      "not \"sig\""));
  EXPECT_TRUE(Refused(
      mixed->verify(rs256(claims_for(kIdp), {{"alg", "RS256"}, {"kid", "rs512-1"}}, other_rsa_.get()), kNow),
      "unknown kid"));
}

TEST_F(JwtTest, CreateRefusesUnsafeOptions) {
  struct Case {
    VerifierOptions options;
    std::string field;
  };
  const Case cases[] = {
      {{.hs256_secret = "short-secret"}, "hs256_secret"},
      {{.hs256_secret = kSecret, .own_issuer = ""}, "own_issuer"},
      {{.hs256_secret = kSecret, .audience = ""}, "audience"},
      {{.jwks_file = jwks_path_}, "external_issuer"},
      {{.jwks_file = jwks_path_, .external_issuer = "cnlab"}, "external_issuer"},
      {{.external_issuer = kIdp}, "jwks_file"},
      {{.hs256_secret = kSecret, .leeway = std::chrono::seconds{-1}}, "leeway"},
      {{.hs256_secret = kSecret, .max_token_bytes = 0}, "max_token_bytes"},
  };
  for (const Case& k : cases) {
    auto v = Verifier::create(k.options);
    ASSERT_FALSE(v) << k.field;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(v.error().field, k.field);
  }
  // The secret never appears in the error.
  auto v = Verifier::create({.hs256_secret = "short-secret"});
  EXPECT_THAT(v.error().to_string(), ::testing::Not(HasSubstr("short-secret")));
}

// ---- helpers -----------------------------------------------------------------------------------

TEST(Base64url, RoundTripsAnyBytes) {
  for (size_t n = 0; n <= 100; ++n) {
    std::string bytes = random_bytes(n);
    std::string text = base64url_encode(bytes);
    EXPECT_EQ(text.find_first_of("=+/"), std::string::npos);
    auto back = base64url_decode(text);
    ASSERT_TRUE(back) << text;
    EXPECT_EQ(*back, bytes);
  }
}

TEST(Base64url, MatchesKnownVectors) {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""}, {"f", "Zg"}, {"fo", "Zm8"}, {"foo", "Zm9v"}, {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"},
      {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"}, {std::string("\0\0\0", 3), "AAAA"},
  };
  for (const auto& [bytes, text] : vectors) {
    EXPECT_EQ(base64url_encode(bytes), text);
    EXPECT_EQ(*base64url_decode(text), bytes);
  }
}

TEST(Base64url, DecodeRefusesPaddingOtherAlphabetsTruncationAndSecondSpellings) {
  // "Zh", "Zm9" and "-_9" set the unused bits of "Zg", "Zm8" and "-_8": second spellings.
  for (std::string_view bad : {"Zg==", "Zm9v=", "Z", "Zm9vY", "Zh", "Zm9", "-_9", "Zm+v", "Zm/v", "Zm 9v",
                               "Zm9v\n"}) {
    EXPECT_FALSE(base64url_decode(bad)) << bad;
  }
}

TEST(Crypto, Sha256HexMatchesTheKnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Crypto, RandomBytesAreFreshEachCall) {
  EXPECT_EQ(random_bytes(0), "");
  EXPECT_EQ(random_bytes(16).size(), 16u);
  EXPECT_NE(random_bytes(16), random_bytes(16));
  std::string hex = random_hex(16);
  EXPECT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace cnlab::auth
