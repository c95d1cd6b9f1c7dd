// Private to src/auth: the OpenSSL EVP calls behind the verifier. No crypto math of our own here;
// every primitive is OpenSSL's.
#pragma once

#include <openssl/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab::auth::detail {

struct PKeyFree {
  void operator()(EVP_PKEY* key) const;
};
using PKey = std::unique_ptr<EVP_PKEY, PKeyFree>;

// HMAC-SHA256 of `data` under `key` (32 bytes); empty if OpenSSL refuses (e.g. an empty key).
std::string hmac_sha256(std::string_view key, std::string_view data);

// Equal length and equal bytes, in time that depends only on the length.
bool constant_time_equal(std::string_view a, std::string_view b);

// RSASSA-PKCS1-v1_5 with SHA-256 over `data`; `key` must be an RSA key.
bool verify_rs256(EVP_PKEY* key, std::string_view data, std::string_view signature);

// ECDSA P-256 with SHA-256 over `data`; `signature` is the JWS form r||s (exactly 64 bytes).
bool verify_es256(EVP_PKEY* key, std::string_view data, std::string_view signature);

// Public keys from JWK members, already base64url-decoded (big-endian unsigned integers). The key
// is checked with EVP_PKEY_public_check; errors say what is wrong, the caller adds the JSON path.
Result<PKey> rsa_public_key(std::string_view n, std::string_view e);
Result<PKey> ec_p256_public_key(std::string_view x, std::string_view y);

}  // namespace cnlab::auth::detail
