// Files the API stores whole under a directory of the data directory (workspace archives by digest,
// a job's artifacts by path): checks of client-given paths, atomic writes that hash what they
// write, reads and listings. Nothing here follows a symbolic link below the directory it is given
// (every component is opened with O_NOFOLLOW, one at a time), so a path can never resolve outside
// it. Temporary files go to `root/.incoming`, which no stored name can reach (callers store under
// names that do not start with '.').
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cnlab::server {

inline constexpr size_t kMaxRelativePathBytes = 4096;
inline constexpr size_t kMaxRelativePathSegments = 32;

// Checks a relative file path a client gave ("out/model.pt"): 1..4096 bytes, at most 32 segments,
// not absolute, no empty, "." or ".." segment, no NUL, no backslash. Errors are kInvalidArgument
// naming `field` and saying which rule the path breaks.
Status check_relative_path(std::string_view path, std::string_view field);

struct BlobInfo {
  std::string path;        // relative to the directory listed (or as written)
  int64_t size_bytes = 0;
  std::string sha256;      // 64 lowercase hex digits; empty where not asked for
};

// SHA-256 of `data` as 64 lowercase hex digits (OpenSSL EVP, fed in pieces as write_blob does).
std::string sha256_hex_of(std::string_view data);

// SHA-256 of the file at `path`, read once; kNotFound naming "path" when it cannot be opened.
Result<std::string> sha256_hex_of_file(const std::string& path);

// Writes `data` as `root/relative`, creating the missing directories on the way (mode 0750): a
// temporary file in `root/.incoming` hashed while it is written, synced, then renamed into place
// (replacing a file there) and the directory synced. `accept`, when given, sees the size and hash
// before the rename; an error from it removes the temporary file and is returned as it is.
// `relative` must have no empty, "." or ".." segment. kConflict naming "path" when a component on
// the way is a file, the target a directory, or either a symbolic link.
Result<BlobInfo> write_blob(const std::string& root, const std::string& relative, std::string_view data,
                            const std::function<Status(const BlobInfo&)>& accept = {});

// The directory (`root/.incoming`, created 0700) where a file on its way in may be written, for
// adopt_blob to store it without a copy: an upload spooled by the HTTP layer.
Result<std::string> blob_incoming_dir(const std::string& root);

// Removes every file left in `root/.incoming` (uploads cut off by a crash); for a server starting,
// when no upload is under way. No directory there is no error.
Status clear_blob_incoming(const std::string& root);

// As write_blob, with the content already in `incoming_file`, a file of blob_incoming_dir(root):
// hashed (read once, unless `known_sha256` gives the hash the HTTP layer computed as the file was
// written), accepted, synced and renamed into place. The file is gone afterwards, stored or
// removed. kInvalidArgument naming "incoming_file" when it is not in that directory.
Result<BlobInfo> adopt_blob(const std::string& root, const std::string& relative, const std::string& incoming_file,
                            const std::function<Status(const BlobInfo&)>& accept = {},
                            const std::string& known_sha256 = "");

// The path of the regular file `root/relative`, to send it without reading it here. kNotFound
// naming "path" when there is none (a directory or a symbolic link is none).
Result<std::string> blob_file(const std::string& root, const std::string& relative);

// Removes the file `root/relative` (never through a symbolic link). Removing what is not there is
// no error.
Status remove_blob(const std::string& root, const std::string& relative);

// Whether the regular file `root/relative` exists, and its size (-1 when it does not).
int64_t blob_size(const std::string& root, const std::string& relative);

// Every regular file under `root/relative_dir`, paths relative to it, in path order; symbolic
// links and other files are skipped. With `hashes`, each file's SHA-256: the one stored with the
// file when it was written (an extended attribute, where the file system keeps them), else read
// and computed. A directory that does not exist lists as empty.
Result<std::vector<BlobInfo>> list_blobs(const std::string& root, const std::string& relative_dir, bool hashes);

}  // namespace cnlab::server
