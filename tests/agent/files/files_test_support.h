// Shared by the src/agent/files tests: a fresh temporary directory, small file helpers, and an
// archive builder (libarchive's writer) for the hostile archives the extractor must refuse.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cnlab::agent::test_support {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnlab-files-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Writes `content` to `path`, creating its parent directories, and sets `mode`.
inline void write_file(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  ::chmod(path.c_str(), mode);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline bool exists_no_follow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

inline mode_t mode_of(const std::string& path) {
  struct stat st {};
  ::lstat(path.c_str(), &st);
  return st.st_mode;
}

// Names in a directory, sorted ("" entries never).
inline std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Builds an archive entry by entry with libarchive's writer, whatever the entries say.
class ArchiveBuilder {
 public:
  enum class Compression { kGzip, kNone };
  enum class Format { kPax, kZip };

  explicit ArchiveBuilder(std::string path, Compression compression = Compression::kGzip, Format format = Format::kPax)
      : a_(archive_write_new()) {
    if (format == Format::kZip) {
      archive_write_set_format_zip(a_);
    } else {
      if (compression == Compression::kGzip) archive_write_add_filter_gzip(a_);
      archive_write_set_format_pax_restricted(a_);
    }
    if (archive_write_open_filename(a_, path.c_str()) != ARCHIVE_OK) std::abort();
  }
  ~ArchiveBuilder() { close(); }

  ArchiveBuilder& file(const std::string& path, const std::string& content, mode_t perm = 0644) {
    return entry(path, AE_IFREG, perm, content, nullptr, nullptr);
  }
  ArchiveBuilder& dir(const std::string& path, mode_t perm = 0755) { return entry(path, AE_IFDIR, perm, "", nullptr, nullptr); }
  ArchiveBuilder& symlink(const std::string& path, const std::string& target) {
    return entry(path, AE_IFLNK, 0777, "", target.c_str(), nullptr);
  }
  ArchiveBuilder& hardlink(const std::string& path, const std::string& target) {
    return entry(path, AE_IFREG, 0644, "", nullptr, target.c_str());
  }
  ArchiveBuilder& special(const std::string& path, mode_t type) { return entry(path, type, 0644, "", nullptr, nullptr); }
  // A file of `size` zero bytes, written in pieces (it compresses to almost nothing).
  ArchiveBuilder& zeros(const std::string& path, int64_t size) {
    archive_entry* e = header(path, AE_IFREG, 0644, size);
    archive_write_header(a_, e);
    std::string piece(1 << 16, '\0');
    for (int64_t left = size; left > 0; left -= static_cast<int64_t>(piece.size())) {
      archive_write_data(a_, piece.data(), static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(piece.size()))));
    }
    archive_entry_free(e);
    return *this;
  }

  void close() {
    if (a_ == nullptr) return;
    archive_write_close(a_);
    archive_write_free(a_);
    a_ = nullptr;
  }

 private:
  archive_entry* header(const std::string& path, mode_t type, mode_t perm, int64_t size) {
    archive_entry* e = archive_entry_new();
    archive_entry_copy_pathname(e, path.c_str());
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, perm);
    archive_entry_set_size(e, size);
    return e;
  }
  ArchiveBuilder& entry(const std::string& path, mode_t type, mode_t perm, const std::string& content,
                        const char* symlink, const char* hardlink) {
    archive_entry* e = header(path, type, perm, static_cast<int64_t>(content.size()));
    if (symlink != nullptr) archive_entry_copy_symlink(e, symlink);
    if (hardlink != nullptr) {
      archive_entry_copy_hardlink(e, hardlink);
      archive_entry_set_size(e, 0);
    }
    if (type == AE_IFCHR || type == AE_IFBLK) archive_entry_set_rdev(e, makedev(1, 3));
    archive_write_header(a_, e);
    if (!content.empty()) archive_write_data(a_, content.data(), content.size());
    archive_entry_free(e);
    return *this;
  }

  struct archive* a_;
};

}  // namespace cnlab::agent::test_support
