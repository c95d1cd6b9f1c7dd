// Tokens from an outside identity provider (ES256, checked against a JWKS file) through a real
// server: accepted with the right issuer and audience and the user's role bindings; refused when
// they claim the server's own issuer (algorithm confusion) or carry a bad signature.
#include <gmock/gmock.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

Time now() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

// A P-256 key pair of the "identity provider", and a signer for its tokens (test-only).
class Provider {
 public:
  Provider() {
    key_ = EVP_EC_gen("P-256");
    if (!key_) std::abort();
  }
  ~Provider() { EVP_PKEY_free(key_); }

  Json jwks() const {
    BIGNUM* x = nullptr;
    BIGNUM* y = nullptr;
    EVP_PKEY_get_bn_param(key_, OSSL_PKEY_PARAM_EC_PUB_X, &x);
    EVP_PKEY_get_bn_param(key_, OSSL_PKEY_PARAM_EC_PUB_Y, &y);
    std::string xs(32, '\0'), ys(32, '\0');
    BN_bn2binpad(x, reinterpret_cast<unsigned char*>(xs.data()), 32);
    BN_bn2binpad(y, reinterpret_cast<unsigned char*>(ys.data()), 32);
    BN_free(x);
    BN_free(y);
    return {{"keys", {{{"kty", "EC"}, {"crv", "P-256"}, {"kid", "idp-1"}, {"alg", "ES256"}, {"use", "sig"},
                       {"x", auth::base64url_encode(xs)}, {"y", auth::base64url_encode(ys)}}}}};
  }

  std::string token(const Json& claims) const {
    std::string signing_input = auth::base64url_encode(R"({"alg":"ES256","typ":"JWT","kid":"idp-1"})") + "." +
                                auth::base64url_encode(claims.dump());
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    size_t length = 0;
    EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key_);
    EVP_DigestSign(ctx, nullptr, &length, reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size());
    std::string der(length, '\0');
    EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(der.data()), &length,
                   reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size());
    EVP_MD_CTX_free(ctx);
    // JWS wants r || s, 32 bytes each, not DER.
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
    ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(length));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(sig), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(sig), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(sig);
    return signing_input + "." + auth::base64url_encode(raw);
  }

 private:
  EVP_PKEY* key_ = nullptr;
};

class ExternalIdpTest : public ClusterTest {
 protected:
  void SetUp() override {
    std::string jwks = dir_.path() + "/jwks.json";
    std::ofstream(jwks) << provider_.jwks().dump();
    start_server({"--jwks", jwks, "--issuer", "https://idp.example.org"});
    create_project("vision");
    call(*admin_, "POST", "/v1/rolebindings", 201, {{"spec", {{"user", "dana"}, {"project", "vision"}, {"role", "member"}}}});
  }
  Json claims(const std::string& issuer) {
    int64_t t = now().time_since_epoch().count();
    return {{"iss", issuer}, {"aud", "cnlab"}, {"sub", "dana"}, {"iat", t}, {"exp", t + 600}};
  }
  int status(const std::string& token) { return server_->client(token)->request("GET", "/v1/projects")->status; }
  Provider provider_;
};

TEST_F(ExternalIdpTest, AProvidersTokenActsWithTheUsersRoleBindings) {
  auto dana = server_->client(provider_.token(claims("https://idp.example.org")));
  Json who = call(*dana, "GET", "/v1/whoami", 200);
  EXPECT_EQ(who["user"], "dana");
  EXPECT_EQ(who["roles"]["vision"], "member");
  Json projects = call(*dana, "GET", "/v1/projects", 200);
  ASSERT_EQ(projects["items"].size(), 1u);
  EXPECT_EQ(projects["items"][0]["metadata"]["name"], "vision");
}

TEST_F(ExternalIdpTest, ProviderTokensClaimingTheServersIssuerWrongAudienceOrBadSignatureAreRefused) {
  EXPECT_EQ(status(provider_.token(claims("cnlab"))), 401);  // algorithm confusion
  Json wrong_audience = claims("https://idp.example.org");
  wrong_audience["aud"] = "someone-else";
  EXPECT_EQ(status(provider_.token(wrong_audience)), 401);
  std::string good = provider_.token(claims("https://idp.example.org"));
  std::string tampered = good;
  tampered[tampered.size() - 5] = tampered[tampered.size() - 5] == 'A' ? 'B' : 'A';
  EXPECT_EQ(status(tampered), 401);
  Json as_node = claims("https://idp.example.org");
  as_node["sub"] = "node:gpu-7";  // node credentials come only from join tokens
  EXPECT_EQ(status(provider_.token(as_node)), 401);
  Provider stranger;  // a key the JWKS does not hold
  EXPECT_EQ(status(stranger.token(claims("https://idp.example.org"))), 401);
  EXPECT_EQ(status(good), 200);
}

}  // namespace
}  // namespace cnlab::server::test_support
