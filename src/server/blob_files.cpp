#include "server/blob_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "auth/auth.h"
#include "common/check.h"

namespace cnlab::server {
namespace {

constexpr size_t kPiece = 1 << 20;  // written, hashed and read in pieces of this size
constexpr const char* kIncoming = ".incoming";
constexpr const char* kHashAttribute = "user.cnlab.sha256";

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    CNLAB_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1);
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const char* data, size_t size) { CNLAB_CHECK(EVP_DigestUpdate(ctx_, data, size) == 1); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    CNLAB_CHECK(EVP_DigestFinal_ex(ctx_, digest, &length) == 1);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < length; ++i) {
      out.push_back(kHex[digest[i] >> 4]);
      out.push_back(kHex[digest[i] & 0xf]);
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

bool is_hash(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string errno_text() { return std::strerror(errno); }

// The segments of a relative path, or empty when one is empty, "." or "..".
std::vector<std::string> segments_of(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return {};
    out.emplace_back(part);
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

Fd open_directory_at(int parent, const std::string& name) {
  return Fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// Opens `root`, creating it when asked.
Result<Fd> open_root(const std::string& root, bool create) {
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
  }
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.ok()) {
    if (errno == ENOENT) return Error::not_found("path", root, "no such directory");
    return Error::internal("open " + root + ": " + errno_text());
  }
  return fd;
}

// Opens the directories `segments[0 .. count)` below `base` one at a time, never following a
// symbolic link; with `created`, makes the missing ones and records which directories gained an
// entry (to sync them).
Result<Fd> open_directories(Fd base, const std::vector<std::string>& segments, size_t count,
                            std::vector<Fd>* created) {
  Fd current = std::move(base);
  std::string walked;
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = segments[i];
    walked += (walked.empty() ? "" : "/") + name;
    if (created) {
      if (::mkdirat(current.get(), name.c_str(), 0750) == 0) {
        created->push_back(Fd(::dup(current.get())));
      } else if (errno != EEXIST) {
        return Error::internal("create directory " + walked + ": " + errno_text());
      }
    }
    Fd next = open_directory_at(current.get(), name);
    if (!next.ok()) {
      if (errno == ENOENT) return Error::not_found("path", walked, "no such directory");
      if (errno == ENOTDIR || errno == ELOOP) {
        return Error::of(ErrorCode::kConflict, "path", walked, "is a file or a symbolic link, not a directory");
      }
      return Error::internal("open directory " + walked + ": " + errno_text());
    }
    current = std::move(next);
  }
  return current;
}

// Opens the regular file `segments` below `root` for reading; kNotFound when there is none.
Result<Fd> open_file(const std::string& root, const std::string& relative) {
  std::vector<std::string> segments = segments_of(relative);
  if (segments.empty()) return Error::invalid_argument("path", relative, "not a relative path");
  auto base = open_root(root, /*create=*/false);
  if (!base) return Error::not_found("path", relative, "no such file");
  auto parent = open_directories(std::move(*base), segments, segments.size() - 1, nullptr);
  if (!parent) return Error::not_found("path", relative, "no such file");
  // O_NONBLOCK: opening a FIFO someone left there must not hang; regular files ignore it.
  Fd fd(::openat(parent->get(), segments.back().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd.ok() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::not_found("path", relative, "no such file");
  }
  return fd;
}

Result<std::string> hash_file(int fd, const std::string& name) {
  Sha256 sha;
  std::string piece(kPiece, '\0');
  while (true) {
    ssize_t n = ::read(fd, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::internal("read " + name + ": " + errno_text());
    if (n == 0) break;
    sha.update(piece.data(), static_cast<size_t>(n));
  }
  return sha.hex();
}

Status walk(int dir, const std::string& prefix, bool hashes, size_t depth, std::vector<BlobInfo>& out) {
  int listing_fd = ::dup(dir);
  if (listing_fd < 0) return Error::internal("dup: " + errno_text());
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return Error::internal("list " + prefix + ": " + errno_text());
  }
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(listing)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(listing);
  for (const std::string& name : names) {
    std::string path = prefix.empty() ? name : prefix + "/" + name;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxRelativePathSegments) continue;
      Fd sub = open_directory_at(dir, name);
      if (!sub.ok()) continue;
      if (auto walked = walk(sub.get(), path, hashes, depth + 1, out); !walked) return walked;
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    BlobInfo info{path, static_cast<int64_t>(st.st_size), ""};
    if (hashes) {
      Fd file(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!file.ok()) continue;
      char stored[65] = {};
      ssize_t n = ::fgetxattr(file.get(), kHashAttribute, stored, 64);
      if (n == 64 && is_hash(std::string_view(stored, 64))) {
        info.sha256.assign(stored, 64);
      } else {
        auto computed = hash_file(file.get(), path);
        if (!computed) return computed.error();
        info.sha256 = std::move(*computed);
      }
    }
    out.push_back(std::move(info));
  }
  return Status::ok();
}

}  // namespace

Status check_relative_path(std::string_view path, std::string_view field) {
  auto refuse = [&](const std::string& why) {
    std::string shown(path.substr(0, 256));
    if (path.size() > 256) shown += "...";
    return Error::invalid_argument(std::string(field), shown, why);
  };
  if (path.empty()) return refuse("a file path is required");
  if (path.size() > kMaxRelativePathBytes) {
    return refuse("longer than " + std::to_string(kMaxRelativePathBytes) + " bytes (" + std::to_string(path.size()) + ")");
  }
  if (path.find('\0') != std::string_view::npos) return refuse("must not contain NUL");
  if (path.find('\\') != std::string_view::npos) return refuse("must not contain a backslash; separate directories with '/'");
  if (path.front() == '/') return refuse("must be relative, not absolute");
  size_t count = 1;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty()) return refuse("has an empty segment (\"//\" or a trailing '/')");
    if (part == "." || part == "..") return refuse("must not have a \".\" or \"..\" segment");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
    ++count;
  }
  if (count > kMaxRelativePathSegments) {
    return refuse("more than " + std::to_string(kMaxRelativePathSegments) + " segments (" + std::to_string(count) + ")");
  }
  return Status::ok();
}

std::string sha256_hex_of(std::string_view data) {
  Sha256 sha;
  for (size_t done = 0; done < data.size(); done += kPiece) {
    sha.update(data.data() + done, std::min(kPiece, data.size() - done));
  }
  return sha.hex();
}

Result<std::string> sha256_hex_of_file(const std::string& path) {
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.ok()) return Error::not_found("path", path, "cannot open: " + errno_text());
  return hash_file(file.get(), path);
}

namespace {

// Where a stored file lands: the temporary directory and the directory it is renamed into.
struct Landing {
  std::vector<std::string> segments;
  Fd incoming;
  Fd parent;
  std::vector<Fd> grown;  // directories that gained an entry: synced after the rename
};

Result<Landing> prepare_landing(const std::string& root, const std::string& relative) {
  Landing landing;
  landing.segments = segments_of(relative);
  if (landing.segments.empty() || landing.segments.front().starts_with(".")) {
    return Error::invalid_argument("path", relative, "not a relative path of a stored file");
  }
  auto base = open_root(root, /*create=*/true);
  if (!base) return base.error();
  if (::mkdirat(base->get(), kIncoming, 0700) != 0 && errno != EEXIST) {
    return Error::internal("create " + root + "/" + kIncoming + ": " + errno_text());
  }
  landing.incoming = open_directory_at(base->get(), kIncoming);
  if (!landing.incoming.ok()) return Error::internal("open " + root + "/" + kIncoming + ": " + errno_text());
  auto parent = open_directories(std::move(*base), landing.segments, landing.segments.size() - 1, &landing.grown);
  if (!parent) return parent.error();
  landing.parent = std::move(*parent);
  return landing;
}

// The temporary file `temporary` (open as `file`, holding what `info` describes) accepted, synced
// and renamed into place; removed on any error.
Result<BlobInfo> land(Landing& landing, const std::string& relative, const std::string& temporary, Fd file,
                      const BlobInfo& info, const std::function<Status(const BlobInfo&)>& accept) {
  auto drop = [&](Error error) {
    ::unlinkat(landing.incoming.get(), temporary.c_str(), 0);
    return error;
  };
  if (accept) {
    if (auto accepted = accept(info); !accepted) return drop(accepted.error());
  }
  // Kept with the file so that listings need not read it back; a file system without user
  // extended attributes just makes listings compute it.
  (void)::fsetxattr(file.get(), kHashAttribute, info.sha256.data(), info.sha256.size(), 0);
  if (::fsync(file.get()) != 0) return drop(Error::internal("sync " + relative + ": " + errno_text()));
  file = Fd();
  if (::renameat(landing.incoming.get(), temporary.c_str(), landing.parent.get(), landing.segments.back().c_str()) != 0) {
    if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR) {
      return drop(Error::of(ErrorCode::kConflict, "path", relative, "is a directory; a file cannot replace it"));
    }
    return drop(Error::internal("rename into " + relative + ": " + errno_text()));
  }
  if (::fsync(landing.parent.get()) != 0) return Error::internal("sync the directory of " + relative + ": " + errno_text());
  for (const Fd& dir : landing.grown) {
    if (dir.ok() && ::fsync(dir.get()) != 0) return Error::internal("sync a directory of " + relative + ": " + errno_text());
  }
  return info;
}

}  // namespace

Result<BlobInfo> write_blob(const std::string& root, const std::string& relative, std::string_view data,
                            const std::function<Status(const BlobInfo&)>& accept) {
  auto landing = prepare_landing(root, relative);
  if (!landing) return landing.error();
  std::string temporary = auth::random_hex(12);
  Fd file(::openat(landing->incoming.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   0640));
  if (!file.ok()) return Error::internal("create a temporary file in " + root + "/" + kIncoming + ": " + errno_text());
  Sha256 sha;
  for (size_t done = 0; done < data.size();) {
    size_t piece = std::min(kPiece, data.size() - done);
    ssize_t n = ::write(file.get(), data.data() + done, piece);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::unlinkat(landing->incoming.get(), temporary.c_str(), 0);
      return Error::internal("write " + relative + ": " + errno_text());
    }
    sha.update(data.data() + done, static_cast<size_t>(n));
    done += static_cast<size_t>(n);
  }
  BlobInfo info{relative, static_cast<int64_t>(data.size()), sha.hex()};
  return land(*landing, relative, temporary, std::move(file), info, accept);
}

Result<std::string> blob_incoming_dir(const std::string& root) {
  auto base = open_root(root, /*create=*/true);
  if (!base) return base.error();
  if (::mkdirat(base->get(), kIncoming, 0700) != 0 && errno != EEXIST) {
    return Error::internal("create " + root + "/" + kIncoming + ": " + errno_text());
  }
  return root + "/" + kIncoming;
}

Status clear_blob_incoming(const std::string& root) {
  auto base = open_root(root, /*create=*/false);
  if (!base) return Status::ok();
  Fd incoming = open_directory_at(base->get(), kIncoming);
  if (!incoming.ok()) return Status::ok();
  std::vector<BlobInfo> left;
  if (auto walked = walk(incoming.get(), "", /*hashes=*/false, kMaxRelativePathSegments, left); !walked) return walked;
  for (const BlobInfo& file : left) {
    if (::unlinkat(incoming.get(), file.path.c_str(), 0) != 0 && errno != ENOENT) {
      return Error::internal("remove " + root + "/" + kIncoming + "/" + file.path + ": " + errno_text());
    }
  }
  return Status::ok();
}

Result<BlobInfo> adopt_blob(const std::string& root, const std::string& relative, const std::string& incoming_file,
                            const std::function<Status(const BlobInfo&)>& accept, const std::string& known_sha256) {
  const std::string name = std::filesystem::path(incoming_file).filename().string();
  if (incoming_file != root + "/" + kIncoming + "/" + name || name.empty() || name == "." || name == "..") {
    return Error::invalid_argument("incoming_file", incoming_file, "not a file in " + root + "/" + kIncoming);
  }
  auto landing = prepare_landing(root, relative);
  if (!landing) return landing.error();
  Fd file(::openat(landing->incoming.get(), name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!file.ok() || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::not_found("incoming_file", incoming_file, "no such file");
  }
  auto hash = is_hash(known_sha256) ? Result<std::string>(known_sha256) : hash_file(file.get(), relative);
  if (!hash) {
    ::unlinkat(landing->incoming.get(), name.c_str(), 0);
    return hash.error();
  }
  BlobInfo info{relative, static_cast<int64_t>(st.st_size), std::move(*hash)};
  return land(*landing, relative, name, std::move(file), info, accept);
}

Result<std::string> blob_file(const std::string& root, const std::string& relative) {
  auto fd = open_file(root, relative);
  if (!fd) return fd.error();
  return root + "/" + relative;
}

Status remove_blob(const std::string& root, const std::string& relative) {
  std::vector<std::string> segments = segments_of(relative);
  if (segments.empty() || segments.front().starts_with(".")) {
    return Error::invalid_argument("path", relative, "not a relative path of a stored file");
  }
  auto base = open_root(root, /*create=*/false);
  if (!base) return Status::ok();
  auto parent = open_directories(std::move(*base), segments, segments.size() - 1, nullptr);
  if (!parent) return parent.error().code == ErrorCode::kNotFound ? Status::ok() : Status(parent.error());
  if (::unlinkat(parent->get(), segments.back().c_str(), 0) != 0 && errno != ENOENT) {
    return Error::internal("remove " + relative + ": " + errno_text());
  }
  return Status::ok();
}

int64_t blob_size(const std::string& root, const std::string& relative) {
  auto fd = open_file(root, relative);
  if (!fd) return -1;
  struct stat st {};
  return ::fstat(fd->get(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

Result<std::vector<BlobInfo>> list_blobs(const std::string& root, const std::string& relative_dir, bool hashes) {
  std::vector<BlobInfo> out;
  std::vector<std::string> segments = segments_of(relative_dir);
  if (segments.empty()) return Error::invalid_argument("path", relative_dir, "not a relative path");
  auto base = open_root(root, /*create=*/false);
  if (!base) return out;
  auto dir = open_directories(std::move(*base), segments, segments.size(), nullptr);
  if (!dir) {
    if (dir.error().code == ErrorCode::kNotFound) return out;
    return dir.error();
  }
  if (auto walked = walk(dir->get(), "", hashes, 0, out); !walked) return walked.error();
  std::sort(out.begin(), out.end(), [](const BlobInfo& a, const BlobInfo& b) { return a.path < b.path; });
  return out;
}

}  // namespace cnlab::server
