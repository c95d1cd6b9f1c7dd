#include "agent/files/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>

#include <cerrno>
#include <vector>

#include <fmt/format.h>

#include "agent/files/unique_fd.h"
#include "common/check.h"
#include "model/workspace.h"

namespace cnlab::agent {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  CNLAB_CHECK(state_->ctx != nullptr && EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->ctx); }

void Sha256::update(const void* data, size_t size) {
  CNLAB_CHECK(EVP_DigestUpdate(state_->ctx, data, size) == 1);
}

std::string Sha256::digest() {
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  CNLAB_CHECK(EVP_DigestFinal_ex(state_->ctx, bytes, &length) == 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(model::kDigestPrefix);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0xf]);
  }
  return out;
}

Result<std::string> sha256_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) {
    int error = errno;
    if (error == ENOENT) return Error::not_found("file", path, "no such file");
    return Error::internal(fmt::format("open {}: {}", path, errno_text(error)));
  }
  Sha256 sha;
  std::vector<char> buffer(1 << 20);
  while (true) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::internal(fmt::format("read {}: {}", path, errno_text(errno)));
    if (n == 0) break;
    sha.update(buffer.data(), static_cast<size_t>(n));
  }
  return sha.digest();
}

Status verify_digest(const std::string& path, std::string_view expected_digest) {
  if (auto valid = model::validate_digest(expected_digest, "digest"); !valid) return valid;
  auto actual = sha256_file(path);
  if (!actual) return actual.error();
  if (*actual != expected_digest) {
    return Error::invalid_argument(
        "digest", std::string(expected_digest),
        fmt::format("the archive {} has digest {}; the download is corrupt or is not the workspace asked for", path,
                    *actual));
  }
  return Status::ok();
}

}  // namespace cnlab::agent
