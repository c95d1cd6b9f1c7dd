// Extraction is done here rather than by libarchive's archive_write_disk: its
// ARCHIVE_EXTRACT_SECURE_SYMLINKS check chdir()s along each path (archive_write_disk_posix.c,
// check_symlinks_fsobj), which changes the working directory of every thread in the agent and
// lets two concurrent extractions corrupt each other's path lookups; and ..._SECURE_NOABSOLUTEPATHS
// only works when the process's working directory is the destination. Working from a descriptor
// of the destination, the same three rules hold here by construction and more strictly: names are
// cleaned and refused when absolute or with "..", every directory on the way is opened with
// O_NOFOLLOW (the kernel refuses to traverse a link, with no check-then-use window), and files,
// links and directories are created with *at() calls that never follow a link in the last
// component. libarchive still does the reading: format detection, gzip, pax headers.
#include "agent/files/workspace_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <unordered_set>

#include <fmt/format.h>

#include "agent/files/digest.h"
#include "agent/files/fs_util.h"
#include "agent/files/path_rules.h"
#include "agent/files/unique_fd.h"

namespace cnlab::agent {
namespace {

using detail::shown;

struct ReadDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

Error refuse(std::string_view path, const std::string& rule) {
  return Error::invalid_argument("archive entry", shown(path), rule);
}

// What a file that libarchive does not read as a tar looks like, for the message.
std::string looks_like(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  unsigned char head[8] = {};
  ssize_t n = fd.ok() ? ::read(fd.get(), head, sizeof head) : -1;
  if (n <= 0) return "it is empty";
  auto starts = [&](std::string_view magic) {
    return static_cast<size_t>(n) >= magic.size() && std::string_view(reinterpret_cast<char*>(head), magic.size()) == magic;
  };
  if (starts("PK\x03\x04")) return "it looks like a zip archive";
  if (starts("\xfd" "7zXZ")) return "it looks like xz-compressed data";
  if (starts("BZh")) return "it looks like bzip2-compressed data";
  if (starts("\x28\xb5\x2f\xfd")) return "it looks like zstd-compressed data";
  if (starts("7z\xbc\xaf")) return "it looks like a 7z archive";
  if (starts("\x1f\x8b")) return "it is gzip-compressed but not a tar archive inside";
  return "its first bytes are not a tar or gzip header";
}

// The process's umask, read without changing it (umask() would, for every thread); 0777 when
// /proc does not say, which makes every mode be set explicitly.
mode_t current_umask() {
  UniqueFd fd(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  char buffer[4096];
  ssize_t n = fd.ok() ? ::read(fd.get(), buffer, sizeof buffer - 1) : -1;
  if (n <= 0) return 0777;
  std::string_view status(buffer, static_cast<size_t>(n));
  size_t at = status.find("Umask:\t");
  if (at == std::string_view::npos) return 0777;
  return static_cast<mode_t>(std::strtoul(buffer + at + 7, nullptr, 8)) & 0777;
}

class Extractor {
 public:
  Extractor(int dest_fd, const UnpackLimits& limits) : dest_fd_(dest_fd), limits_(limits), umask_(current_umask()) {}

  Status run(struct archive* a, const std::string& archive_file) {
    archive_entry* entry = nullptr;
    while (true) {
      int r = archive_read_next_header(a, &entry);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) {
        const char* why = archive_error_string(a);
        if (result_.entry_count == 0) {
          return Error::invalid_argument(
              "archive", archive_file,
              fmt::format("not a workspace archive (a tar, gzip-compressed or plain): {} ({})", looks_like(archive_file),
                          why ? why : "unreadable"));
        }
        return Error::invalid_argument("archive", archive_file,
                                       fmt::format("corrupt or truncated after {} entries: {}", result_.entry_count,
                                                   why ? why : "unreadable"));
      }
      if ((archive_format(a) & ARCHIVE_FORMAT_BASE_MASK) != ARCHIVE_FORMAT_TAR) {
        return Error::invalid_argument("archive", archive_file,
                                       fmt::format("a {} archive; workspaces are tar archives", archive_format_name(a)));
      }
      if (++result_.entry_count > limits_.max_entries) {
        return Error::of(ErrorCode::kTooLarge, "archive", archive_file,
                         fmt::format("more than {} entries, the most a workspace may have", limits_.max_entries));
      }
      if (auto s = extract(a, entry); !s) return s;
    }
    return Status::ok();
  }

  const UnpackResult& result() const { return result_; }

 private:
  Status extract(struct archive* a, archive_entry* entry) {
    const char* raw = archive_entry_pathname(entry);
    if (raw == nullptr) raw = archive_entry_pathname_utf8(entry);
    if (raw == nullptr) return refuse("?", "has a name that cannot be read");
    std::string problem;
    auto path = detail::clean_entry_path(raw, &problem);
    if (!path) return refuse(raw, problem);
    if (path->empty()) return Status::ok();  // "./", the destination itself

    const char* link = archive_entry_hardlink(entry);
    if (link == nullptr) link = archive_entry_hardlink_utf8(entry);
    if (link != nullptr) return extract_hard_link(*path, link);

    mode_t type = archive_entry_filetype(entry);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      return refuse(*path, detail::kind_of(type) + "; workspaces hold only files, directories and links");
    }
    mode_t perm = archive_entry_perm(entry);
    if ((perm & (S_ISUID | S_ISGID)) != 0 && type != AE_IFLNK) {
      return refuse(*path, fmt::format("has the setuid or setgid bit (mode {:04o}); workspaces may not carry them", perm));
    }
    if (type == AE_IFDIR) return extract_directory(*path, (perm & 0777) | 0700);
    if (seen_.count(*path) != 0) return refuse(*path, "appears twice in the archive");
    if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(entry);
      if (target == nullptr) target = archive_entry_symlink_utf8(entry);
      if (target == nullptr) return refuse(*path, "is a symbolic link whose target cannot be read");
      return extract_symlink(*path, target);
    }
    return extract_file(a, entry, *path, perm & 0777);
  }

  Status extract_directory(const std::string& path, mode_t mode) {
    if (seen_.count(path) != 0 && dirs_.count(path) == 0) return refuse(path, "appears twice in the archive");
    auto parent = open_parent(path);
    if (!parent) return parent.error();
    std::string name = base_name(path);
    bool made = ::mkdirat(*parent, name.c_str(), mode) == 0;
    if (!made && errno != EEXIST) return io_error("create the directory", path, errno);
    seen_.insert(path);
    dirs_.insert(path);
    // Opening it again costs time on every cached start; only a umask in the way or an existing
    // directory (whose mode the entry sets) needs it.
    if (made && (mode & umask_) == 0) return Status::ok();
    UniqueFd dir = detail::open_directory_at(*parent, name.c_str());
    if (!dir.ok()) {
      if (errno == ELOOP || errno == ENOTDIR) return refuse(path, "appears twice in the archive");
      return io_error("open the directory", path, errno);
    }
    if (::fchmod(dir.get(), mode) != 0) return io_error("set the mode of", path, errno);
    return Status::ok();
  }

  Status extract_symlink(const std::string& path, const char* target) {
    if (auto problem = detail::symlink_target_problem(path, target)) {
      return refuse(path, "is a symbolic link that " + *problem);
    }
    auto parent = open_parent(path);
    if (!parent) return parent.error();
    if (::symlinkat(target, *parent, base_name(path).c_str()) != 0) {
      if (errno == EEXIST) return refuse(path, "appears twice in the archive");
      return io_error("create the symbolic link", path, errno);
    }
    seen_.insert(path);
    symlinks_.insert(path);
    return Status::ok();
  }

  Status extract_hard_link(const std::string& path, const char* raw_target) {
    std::string problem;
    auto target = detail::clean_entry_path(raw_target, &problem);
    if (!target) return refuse(path, fmt::format("is a hard link to \"{}\", which {}", shown(raw_target), problem));
    if (files_.count(*target) == 0) {
      return refuse(path, fmt::format("is a hard link to \"{}\", which is not a file extracted earlier from this "
                                      "archive; hard links may only join files inside the workspace",
                                      shown(raw_target)));
    }
    if (seen_.count(path) != 0) return refuse(path, "appears twice in the archive");
    auto from = walk_to(parent_of(*target), /*create=*/false);
    if (!from) return from.error();
    auto parent = open_parent(path);
    if (!parent) return parent.error();
    // Flags 0: linkat never follows a symbolic link in the target's last component.
    if (::linkat(from->get(), base_name(*target).c_str(), *parent, base_name(path).c_str(), 0) != 0) {
      if (errno == EEXIST) return refuse(path, "appears twice in the archive");
      return io_error("create the hard link", path, errno);
    }
    seen_.insert(path);
    files_.insert(path);
    ++result_.file_count;
    return Status::ok();
  }

  Status extract_file(struct archive* a, archive_entry* entry, const std::string& path, mode_t mode) {
    int64_t left = limits_.max_content_bytes - result_.content_bytes;
    int64_t declared = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : 0;
    if (declared > left) return over_limit(path, declared);
    auto parent = open_parent(path);
    if (!parent) return parent.error();
    UniqueFd fd(::openat(*parent, base_name(path).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd.ok()) {
      if (errno == EEXIST) return refuse(path, "appears twice in the archive");
      return io_error("create", path, errno);
    }
    seen_.insert(path);
    files_.insert(path);
    ++result_.file_count;
    // The declared size is a claim; what counts is what is written (a sparse or lying entry).
    int64_t end = 0;
    while (true) {
      const void* block = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      int r = archive_read_data_block(a, &block, &size, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) {
        const char* why = archive_error_string(a);
        return refuse(path, fmt::format("cannot be read: {}; the archive is corrupt or truncated", why ? why : "?"));
      }
      int64_t block_end = offset + static_cast<int64_t>(size);
      if (offset < 0 || block_end < offset) return refuse(path, "has a data block at an impossible offset");
      if (block_end > end) {
        if (block_end - end > limits_.max_content_bytes - result_.content_bytes) return over_limit(path, block_end);
        result_.content_bytes += block_end - end;
        end = block_end;
      }
      const char* data = static_cast<const char*>(block);
      size_t done = 0;
      while (done < size) {
        ssize_t n = ::pwrite(fd.get(), data + done, size - done, offset + static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("write", path, errno);
        done += static_cast<size_t>(n);
      }
    }
    if (declared > end) {  // a sparse file ending in a hole
      if (declared - end > limits_.max_content_bytes - result_.content_bytes) return over_limit(path, declared);
      result_.content_bytes += declared - end;
      if (::ftruncate(fd.get(), declared) != 0) return io_error("extend", path, errno);
    }
    if ((mode & umask_) != 0 && ::fchmod(fd.get(), mode) != 0) return io_error("set the mode of", path, errno);
    return Status::ok();
  }

  Error over_limit(const std::string& path, int64_t size) const {
    return Error::of(ErrorCode::kTooLarge, "archive entry", shown(path),
                     fmt::format("with this file ({} bytes or more) the workspace would hold more than {} of files, "
                                 "the limit ({} already written)",
                                 size, detail::human_bytes(limits_.max_content_bytes), result_.content_bytes));
  }

  static Error io_error(std::string_view what, const std::string& path, int error) {
    if (error == ENAMETOOLONG) return refuse(path, "has a name longer than the file system allows");
    return Error::internal(fmt::format("{} \"{}\" while unpacking the workspace: {}", what, shown(path), errno_text(error)));
  }

  static std::string parent_of(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  static std::string base_name(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }

  // The directory `dir` (relative, "" for the destination), opened one component at a time without
  // following links; with `create`, missing directories are made (mode 0755). An entry under a link
  // or a file is refused, naming `entry`.
  Result<UniqueFd> walk_to(const std::string& dir, bool create, const std::string& entry = {}) {
    UniqueFd current(::dup(dest_fd_));
    if (!current.ok()) return io_error("open", ".", errno);
    if (dir.empty()) return current;
    std::string prefix;
    for (std::string_view part : detail::path_segments(dir)) {
      if (!prefix.empty()) prefix += '/';
      prefix += part;
      std::string name(part);
      UniqueFd next = detail::open_directory_at(current.get(), name.c_str());
      if (!next.ok() && errno == ENOENT && create) {
        if (::mkdirat(current.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
          return io_error("create the directory", prefix, errno);
        }
        seen_.insert(prefix);
        dirs_.insert(prefix);
        next = detail::open_directory_at(current.get(), name.c_str());
      }
      if (!next.ok()) {
        int error = errno;
        const std::string& who = entry.empty() ? dir : entry;
        if (error == ELOOP || symlinks_.count(prefix) != 0) {
          return refuse(who, fmt::format("would be written through the symbolic link \"{}\" (an earlier entry); "
                                         "nothing is written through a link",
                                         shown(prefix)));
        }
        if (error == ENOTDIR) return refuse(who, fmt::format("is below \"{}\", which is a file", shown(prefix)));
        return io_error("open the directory", prefix, error);
      }
      current = std::move(next);
    }
    return current;
  }

  // The parent directory of `path`, kept open while entries go on landing in it (archives are
  // sorted, so that is most of the time).
  Result<int> open_parent(const std::string& path) {
    std::string dir = parent_of(path);
    if (!cached_.ok() || dir != cached_dir_) {
      auto opened = walk_to(dir, /*create=*/true, path);
      if (!opened) return opened.error();
      cached_ = std::move(*opened);
      cached_dir_ = dir;
    }
    return cached_.get();
  }

  int dest_fd_;
  UnpackLimits limits_;
  mode_t umask_;
  UnpackResult result_;
  std::unordered_set<std::string> seen_;      // every path created
  std::unordered_set<std::string> dirs_;      // directories, given or implied
  std::unordered_set<std::string> files_;     // regular files: what a hard link may name
  std::unordered_set<std::string> symlinks_;  // for the message when an entry would pass through one
  UniqueFd cached_;
  std::string cached_dir_;
};

}  // namespace

Result<UnpackResult> extract_workspace(const std::string& archive_file, const std::string& dest_dir,
                                       const UnpackLimits& limits) {
  struct stat st {};
  if (::stat(archive_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::not_found("archive", archive_file, "no such file");
  }
  bool created = false;
  if (::mkdir(dest_dir.c_str(), 0755) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    return Error::invalid_argument("dest_dir", dest_dir,
                                   fmt::format("cannot be created ({}); its parent must exist", errno_text(errno)));
  }
  UniqueFd dest = detail::open_directory_at(AT_FDCWD, dest_dir.c_str());
  if (!dest.ok()) {
    return Error::invalid_argument("dest_dir", dest_dir, "exists but is not a directory (or is a symbolic link)");
  }
  if (!created) {
    std::vector<std::string> names;
    if (!detail::list_directory(dest.get(), &names)) {
      return Error::internal(fmt::format("list {}: {}", dest_dir, errno_text(errno)));
    }
    if (!names.empty()) {
      return Error::invalid_argument("dest_dir", dest_dir,
                                     fmt::format("holds {} entries; a workspace is unpacked into an empty or absent "
                                                 "directory",
                                                 names.size()));
    }
  }

  std::unique_ptr<struct archive, ReadDeleter> a(archive_read_new());
  if (!a) return Error::internal("libarchive: out of memory");
  // gzip or nothing, tar and nothing else: every other reader is attack surface we do not need.
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_tar(a.get());
  Extractor extractor(dest.get(), limits);
  Status status = Status::ok();
  if (archive_read_open_filename(a.get(), archive_file.c_str(), 1 << 16) != ARCHIVE_OK) {
    const char* why = archive_error_string(a.get());
    status = Error::invalid_argument("archive", archive_file,
                                     fmt::format("not a workspace archive (a tar, gzip-compressed or plain): {} ({})",
                                                 looks_like(archive_file), why ? why : "unreadable"));
  } else {
    status = extractor.run(a.get(), archive_file);
  }
  if (status) return extractor.result();

  // Leave the destination as it was found.
  if (auto cleaned = detail::remove_directory_contents(dest.get(), dest_dir); !cleaned) {
    return Error{status.error().code, status.error().field, status.error().value,
                 status.error().message + fmt::format(" (and cleaning {} failed: {})", dest_dir, cleaned.error().to_string())};
  }
  if (created) ::rmdir(dest_dir.c_str());
  return status.error();
}

Result<UnpackResult> unpack_workspace(const std::string& archive_file, std::string_view expected_digest,
                                      const std::string& dest_dir, const UnpackLimits& limits) {
  if (auto verified = verify_digest(archive_file, expected_digest); !verified) return verified.error();
  return extract_workspace(archive_file, dest_dir, limits);
}

}  // namespace cnlab::agent
