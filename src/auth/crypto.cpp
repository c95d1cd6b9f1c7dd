// base64url, randomness, SHA-256, HMAC and signature checks: thin wrappers over OpenSSL EVP.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>

#include <fmt/format.h>

#include <climits>
#include <cstdint>

#include "auth/auth.h"
#include "auth/crypto.h"
#include "common/check.h"

namespace cnlab::auth {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr int kMinRsaBits = 2048;
constexpr int kMaxRsaBits = 16384;

int base64url_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

std::string to_hex(const unsigned char* bytes, size_t count) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(count * 2, '\0');
  for (size_t i = 0; i < count; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct PKeyCtxFree {
  void operator()(EVP_PKEY_CTX* ctx) const { EVP_PKEY_CTX_free(ctx); }
};
struct BnFree {
  void operator()(BIGNUM* bn) const { BN_free(bn); }
};
struct ParamBldFree {
  void operator()(OSSL_PARAM_BLD* bld) const { OSSL_PARAM_BLD_free(bld); }
};
struct ParamFree {
  void operator()(OSSL_PARAM* params) const { OSSL_PARAM_free(params); }
};
struct EcdsaSigFree {
  void operator()(ECDSA_SIG* sig) const { ECDSA_SIG_free(sig); }
};
using Bn = std::unique_ptr<BIGNUM, BnFree>;

// OpenSSL's message for the last failure, and an empty error queue for the next call.
std::string openssl_error() {
  unsigned long code = ERR_get_error();
  std::string text = "unknown OpenSSL error";
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    text = buf;
  }
  ERR_clear_error();
  return text;
}

Error key_error(std::string message) { return Error::of(ErrorCode::kInvalidArgument, "", "", std::move(message)); }

bool verify_sha256(EVP_PKEY* key, std::string_view data, std::string_view signature) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  bool ok = ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) == 1 &&
            EVP_DigestVerify(ctx.get(), bytes_of(signature), signature.size(), bytes_of(data), data.size()) == 1;
  if (!ok) ERR_clear_error();
  return ok;
}

// Builds a public key of `type` ("RSA", "EC") from `params` and runs OpenSSL's public-key check.
Result<detail::PKey> public_key_from(const char* type, const OSSL_PARAM* params) {
  std::unique_ptr<EVP_PKEY_CTX, PKeyCtxFree> ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, const_cast<OSSL_PARAM*>(params)) != 1) {
    return key_error(fmt::format("not a valid {} public key: {}", type, openssl_error()));
  }
  detail::PKey key(raw);
  std::unique_ptr<EVP_PKEY_CTX, PKeyCtxFree> check(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (!check || EVP_PKEY_public_check(check.get()) != 1) {
    return key_error(fmt::format("{} public key fails OpenSSL's key check: {}", type, openssl_error()));
  }
  return key;
}

}  // namespace

std::string base64url_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += kAlphabet[v & 63];
  }
  if (bytes.size() - i == 1) {
    uint32_t v = byte(i) << 16;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
  } else if (bytes.size() - i == 2) {
    uint32_t v = byte(i) << 16 | byte(i + 1) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
  }
  return out;
}

Result<std::string> base64url_decode(std::string_view text) {
  if (text.size() % 4 == 1) {
    return Error::of(ErrorCode::kInvalidArgument, "", "",
                     fmt::format("base64url text of {} characters is truncated (a length of 4n+1 is impossible)",
                                 text.size()));
  }
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int v = base64url_value(text[i]);
    if (v < 0) {
      std::string shown = text[i] >= 0x21 && text[i] <= 0x7e ? fmt::format("'{}'", text[i])
                                                               : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(text[i]));
      return Error::of(ErrorCode::kInvalidArgument, "", "",
                       fmt::format("{} at offset {} is not base64url (A-Z, a-z, 0-9, '-', '_', no '=' padding)",
                                   shown, i));
    }
    acc = acc << 6 | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>(acc >> bits & 0xff);
      acc &= (1u << bits) - 1;
    }
  }
  if (acc != 0) {
    // The last character carries bits past the end of the data: a second spelling of the same
    // bytes. Refused so that a token has exactly one encoding.
    return Error::of(ErrorCode::kInvalidArgument, "", "",
                     "base64url text is not canonical (the unused bits of the last character are not zero)");
  }
  return out;
}

std::string random_bytes(size_t count) {
  std::string out(count, '\0');
  if (count == 0) return out;
  CNLAB_CHECK_MSG(count <= INT_MAX, "random_bytes: count too large");
  int ok = RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(count));
  CNLAB_CHECK_MSG(ok == 1, "RAND_bytes failed: " + openssl_error());
  return out;
}

std::string random_hex(size_t bytes) {
  std::string raw = random_bytes(bytes);
  return to_hex(bytes_of(raw), raw.size());
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  int ok = EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  CNLAB_CHECK_MSG(ok == 1 && len == 32, "EVP_Digest(SHA-256) failed: " + openssl_error());
  return to_hex(md, len);
}

namespace detail {

void PKeyFree::operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }

std::string hmac_sha256(std::string_view key, std::string_view data) {
  if (key.empty()) return {};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(), bytes_of(data), data.size(),
                out, sizeof out, &len) == nullptr) {
    ERR_clear_error();
    return {};
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && (a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0);
}

bool verify_rs256(EVP_PKEY* key, std::string_view data, std::string_view signature) {
  if (EVP_PKEY_is_a(key, "RSA") != 1) return false;
  // PKCS#1 v1.5 signatures are exactly the modulus length; refuse anything else up front.
  if (signature.size() != static_cast<size_t>(EVP_PKEY_get_size(key))) return false;
  return verify_sha256(key, data, signature);
}

bool verify_es256(EVP_PKEY* key, std::string_view data, std::string_view signature) {
  if (EVP_PKEY_is_a(key, "EC") != 1 || signature.size() != 64) return false;
  // JWS carries r||s; EVP wants the DER ECDSA-Sig-Value.
  Bn r(BN_bin2bn(bytes_of(signature), 32, nullptr));
  Bn s(BN_bin2bn(bytes_of(signature) + 32, 32, nullptr));
  std::unique_ptr<ECDSA_SIG, EcdsaSigFree> sig(ECDSA_SIG_new());
  if (!r || !s || !sig || ECDSA_SIG_set0(sig.get(), r.get(), s.get()) != 1) {
    ERR_clear_error();
    return false;
  }
  r.release();  // owned by `sig` now
  s.release();
  unsigned char* der = nullptr;
  int der_len = i2d_ECDSA_SIG(sig.get(), &der);
  if (der_len <= 0) {
    ERR_clear_error();
    return false;
  }
  bool ok = verify_sha256(key, data, std::string_view(reinterpret_cast<const char*>(der), static_cast<size_t>(der_len)));
  OPENSSL_free(der);
  return ok;
}

Result<PKey> rsa_public_key(std::string_view n, std::string_view e) {
  Bn bn_n(BN_bin2bn(bytes_of(n), static_cast<int>(n.size()), nullptr));
  Bn bn_e(BN_bin2bn(bytes_of(e), static_cast<int>(e.size()), nullptr));
  if (!bn_n || !bn_e) return key_error("cannot read the RSA modulus or exponent: " + openssl_error());
  int bits = BN_num_bits(bn_n.get());
  if (bits < kMinRsaBits || bits > kMaxRsaBits) {
    return key_error(fmt::format("RSA modulus of {} bits; accepted: {}..{} bits", bits, kMinRsaBits, kMaxRsaBits));
  }
  std::unique_ptr<OSSL_PARAM_BLD, ParamBldFree> bld(OSSL_PARAM_BLD_new());
  if (!bld || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1) {
    return key_error("cannot build RSA key parameters: " + openssl_error());
  }
  std::unique_ptr<OSSL_PARAM, ParamFree> params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (!params) return key_error("cannot build RSA key parameters: " + openssl_error());
  return public_key_from("RSA", params.get());
}

Result<PKey> ec_p256_public_key(std::string_view x, std::string_view y) {
  if (x.size() != 32 || y.size() != 32) {
    return key_error(fmt::format("P-256 coordinates must be 32 bytes each; got x {} and y {} bytes", x.size(),
                                 y.size()));
  }
  std::string point;  // SEC 1 uncompressed form: 0x04 || x || y
  point.reserve(65);
  point += '\x04';
  point += x;
  point += y;
  std::unique_ptr<OSSL_PARAM_BLD, ParamBldFree> bld(OSSL_PARAM_BLD_new());
  if (!bld ||
      OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) != 1 ||
      OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) != 1) {
    return key_error("cannot build EC key parameters: " + openssl_error());
  }
  std::unique_ptr<OSSL_PARAM, ParamFree> params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (!params) return key_error("cannot build EC key parameters: " + openssl_error());
  return public_key_from("EC", params.get());
}

}  // namespace detail
}  // namespace cnlab::auth
