// A request's body as the API stores it: spooled to a file by the HTTP layer (Request::body_file,
// for the upload routes, Api::spool_dir) or, where no spool directory could be made, in memory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/result.h"
#include "net/net.h"
#include "server/blob_files.h"

namespace cnlab::server {

// The body's size in bytes, wherever it is.
size_t body_size(const net::Request& request);

// The body's SHA-256 (64 lowercase hex): as the HTTP layer computed it while spooling, else read.
Result<std::string> body_sha256(const net::Request& request);

// Stores the body as `root/relative`: the spooled file renamed into place without a copy
// (adopt_blob, hashed as it arrived), or the in-memory body written (write_blob). `accept` as
// for those; what it refuses is not stored.
Result<BlobInfo> store_body(const net::Request& request, const std::string& root, const std::string& relative,
                            const std::function<Status(const BlobInfo&)>& accept = {});

}  // namespace cnlab::server
