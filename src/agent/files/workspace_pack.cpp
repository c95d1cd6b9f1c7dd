#include "agent/files/workspace_pack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include <fmt/format.h>

#include "agent/files/digest.h"
#include "agent/files/fs_util.h"
#include "agent/files/ignore_rules.h"
#include "agent/files/path_rules.h"
#include "agent/files/unique_fd.h"

namespace cnlab::agent {
namespace {

constexpr int kMaxDepth = 256;                  // deeper trees are refused rather than exhausting descriptors
constexpr int64_t kMaxIgnoreFileBytes = 1 << 20;  // a bigger .gitignore is not one anybody wrote
constexpr size_t kPiece = 1 << 16;

enum class Kind { kFile, kDirectory, kSymlink };

struct Entry {
  std::string path;
  Kind kind = Kind::kFile;
  mode_t mode = 0;
  int64_t size = 0;
  std::string target;  // of a symbolic link
};

struct Walk {
  bool workspace_rules = true;  // PackOptions::workspace_rules
  IgnoreRules rules;
  std::vector<Entry> entries;
  std::vector<SkippedPath> skipped;
  dev_t output_dev = 0;
  ino_t output_ino = 0;
};

std::string joined(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

// The contents of the ignore file `name` in `dir_fd`, or empty when there is none or it is not a
// regular file (a symbolic link is not read, as git does not).
Result<std::string> read_ignore_file(int dir_fd, const char* name, const std::string& shown_path) {
  UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok()) {
    if (errno == ENOENT || errno == ELOOP) return std::string();
    return Error::internal(fmt::format("open {}: {}", shown_path, errno_text(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::string();
  if (st.st_size > kMaxIgnoreFileBytes) {
    return Error::invalid_argument("ignore file", shown_path,
                                   fmt::format("{} bytes; ignore files may hold at most {} bytes", st.st_size,
                                               kMaxIgnoreFileBytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::internal(fmt::format("read {}: {}", shown_path, errno_text(errno)));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

Status walk(int dir_fd, const std::string& rel_dir, const std::string& root, int depth, Walk& w) {
  if (depth > kMaxDepth) {
    return Error::invalid_argument("dir", root, fmt::format("\"{}\" is nested deeper than {} directories",
                                                            detail::shown(rel_dir), kMaxDepth));
  }
  for (auto [name, source] : {std::pair{".gitignore", IgnoreSource::kGitignore},
                              std::pair{".cnlabignore", IgnoreSource::kCnlabignore}}) {
    if (!w.workspace_rules) break;
    auto text = read_ignore_file(dir_fd, name, root + "/" + joined(rel_dir, name));
    if (!text) return text.error();
    if (!text->empty()) w.rules.add(rel_dir, *text, source);
  }
  std::vector<std::string> names;
  if (!detail::list_directory(dir_fd, &names)) {
    return Error::internal(fmt::format("list {}/{}: {}", root, rel_dir, errno_text(errno)));
  }
  for (const std::string& name : names) {
    if (name == ".git" && w.workspace_rules) continue;  // a repository (or a worktree's pointer to one), never workspace content
    std::string rel = joined(rel_dir, name);
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed while we walk
      return Error::internal(fmt::format("stat {}/{}: {}", root, rel, errno_text(errno)));
    }
    if (st.st_dev == w.output_dev && st.st_ino == w.output_ino) continue;
    bool is_dir = S_ISDIR(st.st_mode);
    if (w.rules.matches(rel, is_dir)) continue;
    if (is_dir) {
      w.entries.push_back({rel, Kind::kDirectory, st.st_mode & 0777, 0, {}});
      UniqueFd child = detail::open_directory_at(dir_fd, name.c_str());
      if (!child.ok()) return Error::internal(fmt::format("open {}/{}: {}", root, rel, errno_text(errno)));
      if (auto s = walk(child.get(), rel, root, depth + 1, w); !s) return s;
    } else if (S_ISREG(st.st_mode)) {
      w.entries.push_back({rel, Kind::kFile, st.st_mode & 0777, static_cast<int64_t>(st.st_size), {}});
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(std::max<off_t>(st.st_size, 0)) + 256, '\0');
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
      if (n < 0) return Error::internal(fmt::format("read link {}/{}: {}", root, rel, errno_text(errno)));
      target.resize(static_cast<size_t>(n));
      if (auto problem = detail::symlink_target_problem(rel, target)) {
        w.skipped.push_back({rel, "a symbolic link that " + *problem + "; only links that stay inside the "
                                  "workspace are packed"});
        continue;
      }
      w.entries.push_back({rel, Kind::kSymlink, 0777, 0, std::move(target)});
    } else {
      w.skipped.push_back({rel, detail::kind_of(st.st_mode) + "; workspaces hold files, directories and links"});
    }
  }
  return Status::ok();
}

Error too_large(const std::string& dir, const Walk& w, int64_t total, int64_t limit) {
  std::vector<const Entry*> files;
  for (const auto& e : w.entries) {
    if (e.kind == Kind::kFile) files.push_back(&e);
  }
  size_t shown = std::min<size_t>(5, files.size());
  std::partial_sort(files.begin(), files.begin() + static_cast<std::ptrdiff_t>(shown), files.end(),
                    [](const Entry* a, const Entry* b) { return a->size != b->size ? a->size > b->size : a->path < b->path; });
  std::string biggest;
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) biggest += ", ";
    biggest += fmt::format("{} ({})", detail::shown(files[i]->path), detail::human_bytes(files[i]->size));
  }
  return Error::of(ErrorCode::kTooLarge, "dir", dir,
                   fmt::format("the workspace holds {} of files, over the limit of {}; the biggest: {}. Leave out "
                               "what the job does not need with .cnlabignore (same syntax as .gitignore)",
                               detail::human_bytes(total), detail::human_bytes(limit), biggest));
}

// Where libarchive's output goes: the file, hashed and counted as it is written.
struct Sink {
  int fd = -1;
  Sha256 sha;
  int64_t bytes = 0;
  int error = 0;
};

la_ssize_t write_to_sink(struct archive*, void* client, const void* buffer, size_t length) {
  auto* sink = static_cast<Sink*>(client);
  const char* data = static_cast<const char*>(buffer);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::write(sink->fd, data + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      sink->error = errno;
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  sink->sha.update(buffer, length);
  sink->bytes += static_cast<int64_t>(length);
  return static_cast<la_ssize_t>(length);
}

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

Status write_archive(int root_fd, const std::string& dir, const std::vector<Entry>& entries, Sink& sink,
                     const std::string& output, int compression_level) {
  const std::string level = std::to_string(compression_level);
  std::unique_ptr<struct archive, ArchiveDeleter> a(archive_write_new());
  if (!a) return Error::internal("libarchive: out of memory");
  auto failed = [&](const std::string& what) {
    std::string why = sink.error != 0 ? errno_text(sink.error) : archive_error_string(a.get()) ? archive_error_string(a.get()) : "unknown error";
    return Error::internal(fmt::format("writing the workspace archive {}: {}: {}", output, what, why));
  };
  // No timestamp in the gzip header, and names as raw bytes whatever the locale: both would
  // otherwise change the digest of an unchanged directory.
  const bool gzip = compression_level > 0;
  if ((gzip && (archive_write_add_filter_gzip(a.get()) != ARCHIVE_OK ||
                archive_write_set_filter_option(a.get(), "gzip", "timestamp", nullptr) != ARCHIVE_OK ||
                archive_write_set_filter_option(a.get(), "gzip", "compression-level", level.c_str()) != ARCHIVE_OK)) ||
      archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_set_format_option(a.get(), nullptr, "hdrcharset", "BINARY") != ARCHIVE_OK) {
    return failed("set up");
  }
  if (archive_write_open(a.get(), &sink, nullptr, write_to_sink, nullptr) != ARCHIVE_OK) return failed("open");
  std::vector<char> buffer(kPiece);
  for (const Entry& e : entries) {
    std::unique_ptr<archive_entry, EntryDeleter> header(archive_entry_new());
    archive_entry_copy_pathname(header.get(), e.path.c_str());
    archive_entry_set_perm(header.get(), e.mode);
    archive_entry_set_mtime(header.get(), 0, 0);
    archive_entry_set_uid(header.get(), 0);
    archive_entry_set_gid(header.get(), 0);
    UniqueFd file;
    switch (e.kind) {
      case Kind::kDirectory:
        archive_entry_set_filetype(header.get(), AE_IFDIR);
        archive_entry_set_size(header.get(), 0);
        break;
      case Kind::kSymlink:
        archive_entry_set_filetype(header.get(), AE_IFLNK);
        archive_entry_set_size(header.get(), 0);
        archive_entry_copy_symlink(header.get(), e.target.c_str());
        break;
      case Kind::kFile: {
        file.reset(::openat(root_fd, e.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        struct stat st {};
        if (!file.ok()) return Error::internal(fmt::format("open {}/{}: {}", dir, e.path, errno_text(errno)));
        if (::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != e.size) {
          return Error::failed_precondition(fmt::format("{}/{} changed while the workspace was packed; pack again",
                                                        dir, e.path));
        }
        archive_entry_set_filetype(header.get(), AE_IFREG);
        archive_entry_set_size(header.get(), e.size);
        break;
      }
    }
    if (archive_write_header(a.get(), header.get()) < ARCHIVE_WARN) return failed("entry " + e.path);
    if (e.kind != Kind::kFile) continue;
    int64_t left = e.size;
    while (left > 0) {
      ssize_t n = ::read(file.get(), buffer.data(), static_cast<size_t>(std::min<int64_t>(left, kPiece)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error::internal(fmt::format("read {}/{}: {}", dir, e.path, errno_text(errno)));
      if (n == 0) {
        return Error::failed_precondition(fmt::format("{}/{} shrank while the workspace was packed; pack again", dir,
                                                      e.path));
      }
      if (archive_write_data(a.get(), buffer.data(), static_cast<size_t>(n)) != n) return failed("data of " + e.path);
      left -= n;
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return failed("close");
  return Status::ok();
}

}  // namespace

Result<PackResult> pack_workspace(const std::string& dir, const PackOptions& options) {
  if (options.output_path.empty()) return Error::invalid_argument("output_path", "", "required: where to write the archive");
  if (options.compression_level < 0 || options.compression_level > 9) {
    return Error::invalid_argument("compression_level", std::to_string(options.compression_level), "0 (a plain tar) or 1 to 9 (gzip's levels)");
  }
  UniqueFd root = detail::open_directory_at(AT_FDCWD, dir.c_str());
  if (!root.ok()) {
    int error = errno;
    if (error == ENOENT || error == ENOTDIR || error == ELOOP) {
      return Error::invalid_argument("dir", dir, "not a directory (a symbolic link is not followed)");
    }
    return Error::internal(fmt::format("open {}: {}", dir, errno_text(error)));
  }

  UniqueFd output(::open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!output.ok()) {
    return Error::internal(fmt::format("create the archive {}: {}", options.output_path, errno_text(errno)));
  }
  auto fail = [&](Error error) -> Result<PackResult> {
    ::unlink(options.output_path.c_str());
    return error;
  };
  Walk w;
  w.workspace_rules = options.workspace_rules;
  struct stat out_st {};
  if (::fstat(output.get(), &out_st) == 0) {
    w.output_dev = out_st.st_dev;
    w.output_ino = out_st.st_ino;
  }
  if (auto walked = walk(root.get(), "", dir, 0, w); !walked) return fail(walked.error());

  int64_t total = 0;
  int64_t files = 0;
  for (const auto& e : w.entries) {
    if (e.kind != Kind::kFile) continue;
    total += e.size;
    ++files;
  }
  if (total > options.max_content_bytes) return fail(too_large(dir, w, total, options.max_content_bytes));
  if (static_cast<int64_t>(w.entries.size()) > options.max_entries) {
    return fail(Error::of(ErrorCode::kTooLarge, "dir", dir,
                          fmt::format("the workspace holds {} files, directories and links, over the limit of {}; "
                                      "leave out what the job does not need with .cnlabignore",
                                      w.entries.size(), options.max_entries)));
  }
  // Byte order of the whole path: a directory still comes before what it holds (a prefix sorts
  // first), and the order does not depend on the file system's.
  std::sort(w.entries.begin(), w.entries.end(), [](const Entry& a, const Entry& b) { return a.path < b.path; });

  Sink sink;
  sink.fd = output.get();
  if (auto written = write_archive(root.get(), dir, w.entries, sink, options.output_path, options.compression_level);
      !written) {
    return fail(written.error());
  }
  if (::close(output.release()) != 0) {
    return fail(Error::internal(fmt::format("write the archive {}: {}", options.output_path, errno_text(errno))));
  }
  if (sink.bytes > options.max_archive_bytes) {
    return fail(Error::of(ErrorCode::kTooLarge, "dir", dir,
                          fmt::format("the workspace compresses to {}, over the limit of {} for an upload; leave out "
                                      "what the job does not need with .cnlabignore",
                                      detail::human_bytes(sink.bytes), detail::human_bytes(options.max_archive_bytes))));
  }
  PackResult result;
  result.archive_path = options.output_path;
  result.digest = sink.sha.digest();
  result.archive_bytes = sink.bytes;
  result.content_bytes = total;
  result.file_count = files;
  result.entry_count = static_cast<int64_t>(w.entries.size());
  result.skipped = std::move(w.skipped);
  return result;
}

}  // namespace cnlab::agent
