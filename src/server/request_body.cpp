#include "server/request_body.h"

#include <sys/stat.h>

namespace cnlab::server {

size_t body_size(const net::Request& request) {
  if (request.body_file.empty()) return request.body.size();
  struct stat st {};
  return ::stat(request.body_file.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

Result<std::string> body_sha256(const net::Request& request) {
  if (request.body_file.empty()) return sha256_hex_of(request.body);
  if (!request.body_sha256.empty()) return request.body_sha256;
  return sha256_hex_of_file(request.body_file);
}

Result<BlobInfo> store_body(const net::Request& request, const std::string& root, const std::string& relative,
                            const std::function<Status(const BlobInfo&)>& accept) {
  if (request.body_file.empty()) return write_blob(root, relative, request.body, accept);
  return adopt_blob(root, relative, request.body_file, accept, request.body_sha256);
}

}  // namespace cnlab::server
