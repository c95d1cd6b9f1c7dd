// SHA-256 digests of workspace archives, in the form the API names them: "sha256:<64 hex>".
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab::agent {

// An incremental SHA-256 (OpenSSL EVP). Not copyable; one per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  // "sha256:<64 lowercase hex>"; call once, at the end.
  std::string digest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The digest of the file at `path`, read in pieces (memory stays small whatever the size).
// kNotFound naming "file" when it does not exist; kInternal on a read error.
Result<std::string> sha256_file(const std::string& path);

// Checks that the file at `path` has `expected_digest`. kInvalidArgument naming "digest" when
// `expected_digest` is not "sha256:" + 64 lowercase hex digits, or when the file's digest differs
// (the message gives both); errors of sha256_file otherwise.
Status verify_digest(const std::string& path, std::string_view expected_digest);

}  // namespace cnlab::agent
