// The private CA and server certificate, with OpenSSL's X509 and EVP APIs.
#include "net/tls_files.h"

#include "net/http_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace cnlab::net {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using X509Ptr = std::unique_ptr<X509, Free>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Free>;
using BnPtr = std::unique_ptr<BIGNUM, Free>;
using BioPtr = std::unique_ptr<BIO, Free>;
using ReqPtr = std::unique_ptr<X509_REQ, Free>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Free>;

// The first queued OpenSSL error as text, and the queue cleared.
std::string openssl_error() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

Error tls_error(std::string what) { return Error::internal(what + ": " + openssl_error()); }

Result<PkeyPtr> new_p256_key() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return tls_error("generating an EC P-256 key");
  return key;
}

// Writes `pem` to `path` through `path.tmp` and a rename, with `mode`.
Status write_file(const std::string& path, const std::string& pem, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return Error::invalid_argument("file", path, std::string("cannot create: ") + std::strerror(errno));
  }
  bool ok = ::fchmod(fd, mode) == 0;
  size_t written = 0;
  while (ok && written < pem.size()) {
    ssize_t n = ::write(fd, pem.data() + written, pem.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    written += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int saved = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    saved = errno;
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return Error::invalid_argument("file", path, std::string("cannot write: ") + std::strerror(saved));
  }
  return Status::ok();
}

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

Result<std::string> key_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return tls_error("encoding a private key");
  }
  return bio_text(bio.get());
}

Result<std::string> cert_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return tls_error("encoding a certificate");
  return bio_text(bio.get());
}

// A certificate with a random positive 127-bit serial, `key` as its public key and `subject_cn`,
// valid from an hour ago for `days`.
Result<X509Ptr> new_cert(EVP_PKEY* key, const std::string& subject_cn, int days) {
  X509Ptr cert(X509_new());
  if (!cert) return tls_error("allocating a certificate");
  if (X509_set_version(cert.get(), 2) != 1) return tls_error("setting the certificate version");
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) return tls_error("drawing a serial number");
  serial_bytes[0] &= 0x7f;
  BnPtr serial(BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr));
  if (!serial || !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get()))) {
    return tls_error("setting the serial number");
  }
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400)) {
    return tls_error("setting the validity period");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1, -1, 0) != 1) {
    return tls_error("setting the subject name");
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return tls_error("setting the public key");
  return cert;
}

Status add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return tls_error(std::string("adding the extension ") + OBJ_nid2sn(nid) + " = " + value);
  }
  return Status::ok();
}

Status add_extensions(X509* cert, X509* issuer,
                      std::initializer_list<std::pair<int, std::string>> extensions) {
  for (const auto& [nid, value] : extensions) {
    if (auto status = add_extension(cert, issuer, nid, value); !status) return status;
  }
  return Status::ok();
}

Status sign_and_write(X509* cert, EVP_PKEY* signer, EVP_PKEY* key, const std::string& cert_path,
                      const std::string& key_path) {
  if (X509_sign(cert, signer, EVP_sha256()) == 0) return tls_error("signing the certificate");
  auto key_text = key_pem(key);
  if (!key_text) return key_text.error();
  auto cert_text = cert_pem(cert);
  if (!cert_text) return cert_text.error();
  if (auto status = write_file(key_path, *key_text, 0600); !status) return status;
  return write_file(cert_path, *cert_text, 0644);
}

Status check_days(int days) {
  if (days < 1 || days > 100 * 365) {
    return Error::invalid_argument("days", std::to_string(days), "must be between 1 and 36500");
  }
  return Status::ok();
}

Result<X509Ptr> read_cert(const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) {
    ERR_clear_error();
    return Error::invalid_argument("file", path, std::string("cannot read: ") + std::strerror(errno));
  }
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return Error::invalid_argument("file", path, "not a PEM certificate: " + openssl_error());
  return cert;
}

Result<PkeyPtr> read_key(const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) {
    ERR_clear_error();
    return Error::invalid_argument("file", path, std::string("cannot read: ") + std::strerror(errno));
  }
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return Error::invalid_argument("file", path, "not a PEM private key: " + openssl_error());
  return key;
}

// The CA's certificate and key, checked to belong together.
Result<std::pair<X509Ptr, PkeyPtr>> read_ca(const std::string& ca_cert, const std::string& ca_key) {
  auto issuer = read_cert(ca_cert);
  if (!issuer) return issuer.error();
  auto issuer_key = read_key(ca_key);
  if (!issuer_key) return issuer_key.error();
  if (X509_check_private_key(issuer->get(), issuer_key->get()) != 1) {
    ERR_clear_error();
    return Error::invalid_argument("file", ca_key, "is not the private key of the CA certificate " + ca_cert);
  }
  return std::pair{std::move(*issuer), std::move(*issuer_key)};
}

int64_t epoch_seconds(const ASN1_TIME* time) {
  struct tm parts = {};
  if (ASN1_TIME_to_tm(time, &parts) != 1) return 0;
  return static_cast<int64_t>(timegm(&parts));
}

std::vector<std::string> dns_names_of(X509* cert) {
  std::vector<std::string> out;
  NamesPtr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_DNS) continue;
    const ASN1_IA5STRING* text = name->d.dNSName;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)), static_cast<size_t>(ASN1_STRING_length(text)));
  }
  return out;
}

bool valid_dns_name(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '.' || c == '*' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool valid_ip(const std::string& text) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, text.c_str(), buffer) == 1 || inet_pton(AF_INET6, text.c_str(), buffer) == 1;
}

}  // namespace

Status create_ca(const std::string& cert_path, const std::string& key_path, const std::string& common_name,
                 int days) {
  if (auto status = check_days(days); !status) return status;
  if (common_name.empty()) return Error::invalid_argument("common name", common_name, "must not be empty");
  auto key = new_p256_key();
  if (!key) return key.error();
  auto cert = new_cert(key->get(), common_name, days);
  if (!cert) return cert.error();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) return tls_error("setting the issuer name");
  auto status = add_extensions(c, c,
                               {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                {NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"},
                                {NID_subject_key_identifier, "hash"},
                                {NID_authority_key_identifier, "keyid:always"}});
  if (!status) return status;
  return sign_and_write(c, key->get(), key->get(), cert_path, key_path);
}

Status issue_server_cert(const std::string& ca_cert, const std::string& ca_key, const std::string& cert_path,
                         const std::string& key_path, const std::vector<std::string>& dns_names,
                         const std::vector<std::string>& ip_addresses, int days) {
  if (auto status = check_days(days); !status) return status;
  if (dns_names.empty() && ip_addresses.empty()) {
    return Error::invalid_argument("names", "", "a server certificate needs at least one DNS name or IP address");
  }
  std::string san;
  for (const auto& name : dns_names) {
    if (!valid_dns_name(name)) {
      return Error::invalid_argument("DNS name", name, "use letters, digits, '-', '.' (and a leading '*.')");
    }
    san += (san.empty() ? "DNS:" : ",DNS:") + name;
  }
  for (const auto& ip : ip_addresses) {
    if (!valid_ip(ip)) return Error::invalid_argument("IP address", ip, "not an IPv4 or IPv6 address");
    san += (san.empty() ? "IP:" : ",IP:") + ip;
  }
  auto ca = read_ca(ca_cert, ca_key);
  if (!ca) return ca.error();
  auto& [issuer, issuer_key] = *ca;
  auto key = new_p256_key();
  if (!key) return key.error();
  auto cert = new_cert(key->get(), dns_names.empty() ? ip_addresses.front() : dns_names.front(), days);
  if (!cert) return cert.error();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer.get())) != 1) {
    return tls_error("setting the issuer name");
  }
  auto status = add_extensions(c, issuer.get(),
                               {{NID_basic_constraints, "critical,CA:FALSE"},
                                {NID_key_usage, "critical,digitalSignature"},
                                {NID_ext_key_usage, "serverAuth"},
                                {NID_subject_alt_name, san},
                                {NID_subject_key_identifier, "hash"},
                                {NID_authority_key_identifier, "keyid:always"}});
  if (!status) return status;
  return sign_and_write(c, issuer_key.get(), key->get(), cert_path, key_path);
}

std::string node_dns_name(const std::string& node) { return node + ".node.cnlab"; }

Result<KeyAndRequest> create_key_and_request(const std::string& common_name) {
  auto key = new_p256_key();
  if (!key) return key.error();
  ReqPtr request(X509_REQ_new());
  if (!request || X509_REQ_set_version(request.get(), 0) != 1) return tls_error("allocating a signing request");
  X509_NAME* name = X509_REQ_get_subject_name(request.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0) != 1) {
    return tls_error("setting the request's subject");
  }
  if (X509_REQ_set_pubkey(request.get(), key->get()) != 1 || X509_REQ_sign(request.get(), key->get(), EVP_sha256()) == 0) {
    return tls_error("signing the request");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), request.get()) != 1) return tls_error("encoding the request");
  auto key_text = key_pem(key->get());
  if (!key_text) return key_text.error();
  return KeyAndRequest{*key_text, bio_text(bio.get())};
}

Result<std::string> issue_node_cert(const std::string& ca_cert, const std::string& ca_key,
                                    const std::string& request_pem, const std::string& node, int days) {
  if (auto status = check_days(days); !status) return status.error();
  if (!valid_dns_name(node) || node.find('*') != std::string::npos) {
    return Error::invalid_argument("node", node, "a node name: letters, digits, '-' and '.'");
  }
  BioPtr bio(BIO_new_mem_buf(request_pem.data(), static_cast<int>(request_pem.size())));
  ReqPtr request(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!request) {
    return Error::invalid_argument("csr", request_pem.substr(0, 40), "not a PEM certificate signing request: " + openssl_error());
  }
  PkeyPtr key(X509_REQ_get_pubkey(request.get()));
  if (!key || X509_REQ_verify(request.get(), key.get()) != 1) {
    return Error::invalid_argument("csr", request_pem.substr(0, 40),
                                   "its signature does not verify with its own key: " + openssl_error());
  }
  auto ca = read_ca(ca_cert, ca_key);
  if (!ca) return ca.error();
  auto& [issuer, issuer_key] = *ca;
  auto cert = new_cert(key.get(), node, days);
  if (!cert) return cert.error();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer.get())) != 1) return tls_error("setting the issuer name");
  auto status = add_extensions(c, issuer.get(),
                               {{NID_basic_constraints, "critical,CA:FALSE"},
                                {NID_key_usage, "critical,digitalSignature"},
                                {NID_ext_key_usage, "serverAuth,clientAuth"},
                                {NID_subject_alt_name, "DNS:" + node_dns_name(node)},
                                {NID_subject_key_identifier, "hash"},
                                {NID_authority_key_identifier, "keyid:always"}});
  if (!status) return status.error();
  if (X509_sign(c, issuer_key.get(), EVP_sha256()) == 0) return tls_error("signing the certificate");
  return cert_pem(c);
}

Result<CertInfo> read_cert_info(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return Error::invalid_argument("certificate", pem.substr(0, 40), "not a PEM certificate: " + openssl_error());
  CertInfo info;
  info.not_before = epoch_seconds(X509_get0_notBefore(cert.get()));
  info.not_after = epoch_seconds(X509_get0_notAfter(cert.get()));
  info.dns_names = dns_names_of(cert.get());
  return info;
}

namespace detail {

std::vector<std::string> peer_dns_names(ssl_st* ssl) {
  if (SSL_get_verify_result(ssl) != X509_V_OK) return {};
  X509Ptr cert(SSL_get1_peer_certificate(ssl));
  return cert ? dns_names_of(cert.get()) : std::vector<std::string>{};
}

}  // namespace detail

Status write_private_file(const std::string& path, const std::string& text, unsigned mode) {
  return write_file(path, text, static_cast<mode_t>(mode));
}

}  // namespace cnlab::net
