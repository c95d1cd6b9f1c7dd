#include "agent/files/workspace_pack.h"

#include <archive.h>
#include <archive_entry.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "agent/files/workspace_unpack.h"
#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::exists_no_follow;
using test_support::read_file;
using test_support::TempDir;
using test_support::write_file;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct ReadEntry {
  std::string path;
  mode_t type;
  mode_t perm;
  int64_t mtime;
  int64_t uid;
  int64_t gid;
  std::string uname;
  std::string symlink;
};

// The entries of an archive as libarchive reads them back.
std::vector<ReadEntry> entries_of(const std::string& archive_path) {
  std::vector<ReadEntry> out;
  struct archive* a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_all(a);
  if (archive_read_open_filename(a, archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    archive_read_free(a);
    return out;
  }
  archive_entry* e = nullptr;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    const char* uname = archive_entry_uname(e);
    const char* link = archive_entry_symlink(e);
    out.push_back({archive_entry_pathname(e), archive_entry_filetype(e), archive_entry_perm(e), archive_entry_mtime(e),
                   archive_entry_uid(e), archive_entry_gid(e), uname ? uname : "", link ? link : ""});
  }
  archive_read_free(a);
  return out;
}

std::vector<std::string> paths_of(const std::vector<ReadEntry>& entries) {
  std::vector<std::string> paths;
  for (const auto& e : entries) {
    std::string path = e.path;
    if (path.ends_with('/')) path.pop_back();  // libarchive's writer marks directories so
    paths.push_back(path);
  }
  return paths;
}

class PackTest : public ::testing::Test {
 protected:
  // A small project: nested sources, a script, an empty directory.
  void make_project(const std::string& root) {
    write_file(root + "/train.py", "print('train')\n");
    write_file(root + "/run.sh", "#!/bin/sh\necho run\n", 0755);
    write_file(root + "/src/model/net.py", "class Net: pass\n");
    write_file(root + "/src/util.py", "def f(): pass\n");
    std::filesystem::create_directories(root + "/empty");
  }
  Result<PackResult> pack(const std::string& root, const std::string& name = "ws.tar.gz", PackOptions options = {}) {
    options.output_path = out_ / name;
    return pack_workspace(root, options);
  }

  TempDir tmp_;
  TempDir out_;
};

TEST_F(PackTest, SameDirectoryPackedTwiceGivesTheSameDigest) {
  make_project(tmp_.path());
  auto first = pack(tmp_.path(), "a.tar.gz");
  auto second = pack(tmp_.path(), "b.tar.gz");
  ASSERT_TRUE(first) << first.error().to_string();
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_THAT(first->digest, ::testing::MatchesRegex("sha256:[0-9a-f]{64}"));
  EXPECT_EQ(first->digest, second->digest);
  EXPECT_EQ(read_file(first->archive_path), read_file(second->archive_path));
  EXPECT_EQ(first->file_count, 4);
  EXPECT_EQ(first->entry_count, 7);  // 4 files; src, src/model, empty
}

TEST_F(PackTest, SameContentWithOtherTimesGivesTheSameDigest) {
  TempDir other;
  make_project(tmp_.path());
  make_project(other.path());
  struct timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ::utimensat(AT_FDCWD, (other / "train.py").c_str(), old_times, 0);
  ::utimensat(AT_FDCWD, (other / "src").c_str(), old_times, 0);
  auto first = pack(tmp_.path(), "a.tar.gz");
  auto second = pack(other.path(), "b.tar.gz");
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->digest, second->digest);
}

TEST_F(PackTest, ChangedByteOrModeChangesTheDigest) {
  make_project(tmp_.path());
  auto before = pack(tmp_.path(), "a.tar.gz");
  write_file(tmp_ / "src/util.py", "def g(): pass\n");
  auto after_edit = pack(tmp_.path(), "b.tar.gz");
  ::chmod((tmp_ / "train.py").c_str(), 0755);
  auto after_chmod = pack(tmp_.path(), "c.tar.gz");
  ASSERT_TRUE(before && after_edit && after_chmod);
  EXPECT_NE(before->digest, after_edit->digest);
  EXPECT_NE(after_edit->digest, after_chmod->digest);
}

TEST_F(PackTest, HeadersCarryNoTimesOwnersOrGzipTimestamp) {
  make_project(tmp_.path());
  auto packed = pack(tmp_.path());
  ASSERT_TRUE(packed);
  std::string bytes = read_file(packed->archive_path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 2), "\x1f\x8b");
  EXPECT_EQ(bytes.substr(4, 4), std::string(4, '\0'));  // gzip MTIME
  auto entries = entries_of(packed->archive_path);
  ASSERT_EQ(entries.size(), 7u);
  for (const auto& e : entries) {
    EXPECT_EQ(e.mtime, 0) << e.path;
    EXPECT_EQ(e.uid, 0) << e.path;
    EXPECT_EQ(e.gid, 0) << e.path;
    EXPECT_EQ(e.uname, "") << e.path;
  }
  EXPECT_THAT(paths_of(entries), ElementsAre("empty", "run.sh", "src", "src/model", "src/model/net.py", "src/util.py",
                                             "train.py"));
}

TEST_F(PackTest, ExecBitSurvivesARoundTrip) {
  make_project(tmp_.path());
  auto packed = pack(tmp_.path());
  ASSERT_TRUE(packed);
  std::string dest = out_ / "unpacked";
  auto unpacked = unpack_workspace(packed->archive_path, packed->digest, dest);
  ASSERT_TRUE(unpacked) << unpacked.error().to_string();
  EXPECT_EQ(test_support::mode_of(dest + "/run.sh") & 0777, 0755u);
  EXPECT_EQ(test_support::mode_of(dest + "/train.py") & 0777, 0644u);
  EXPECT_EQ(read_file(dest + "/run.sh"), "#!/bin/sh\necho run\n");
}

TEST_F(PackTest, HonoursGitignoreCnlabignoreAndSkipsGit) {
  make_project(tmp_.path());
  write_file(tmp_ / ".gitignore", "*.pyc\n/data/\nlogs/\n!keep.pyc\n");
  write_file(tmp_ / ".cnlabignore", "*.ckpt\n!important.pyc\n");
  write_file(tmp_ / "a.pyc", "x");
  write_file(tmp_ / "keep.pyc", "x");
  write_file(tmp_ / "important.pyc", "x");
  write_file(tmp_ / "data/big.bin", "x");
  write_file(tmp_ / "src/data/small.bin", "x");  // "/data/" is anchored to the root
  write_file(tmp_ / "src/logs/run.txt", "x");
  write_file(tmp_ / "model.ckpt", "x");
  write_file(tmp_ / "src/.gitignore", "*.tmp\n");
  write_file(tmp_ / "src/x.tmp", "x");
  write_file(tmp_ / "x.tmp", "x");  // src/.gitignore does not reach the root
  write_file(tmp_ / ".git/config", "[core]\n");
  write_file(tmp_ / "sub/.git", "gitdir: ../.git/modules/sub\n");
  auto packed = pack(tmp_.path());
  ASSERT_TRUE(packed);
  auto paths = paths_of(entries_of(packed->archive_path));
  for (const char* in : {".gitignore", ".cnlabignore", "keep.pyc", "important.pyc", "src/data/small.bin", "x.tmp",
                         "src/.gitignore", "sub"}) {
    EXPECT_THAT(paths, ::testing::Contains(in));
  }
  for (const char* out : {"a.pyc", "data", "data/big.bin", "src/logs", "src/logs/run.txt", "model.ckpt", "src/x.tmp",
                          ".git", ".git/config", "sub/.git"}) {
    EXPECT_THAT(paths, Not(::testing::Contains(out)));
  }
}

TEST_F(PackTest, WithoutWorkspaceRulesEveryFileIsPackedIgnoreFilesAndGitIncluded) {
  // A checkpoint directory: what the job saved is all wanted, whatever files it holds.
  write_file(tmp_ / ".gitignore", "*.ckpt\n");
  write_file(tmp_ / "model.ckpt", "weights");
  write_file(tmp_ / ".git/config", "[core]\n");
  PackOptions options;
  options.workspace_rules = false;
  auto packed = pack(tmp_.path(), "ckpt.tar.gz", options);
  ASSERT_TRUE(packed) << packed.error().to_string();
  EXPECT_THAT(paths_of(entries_of(packed->archive_path)),
              ElementsAre(".git", ".git/config", ".gitignore", "model.ckpt"));
}

TEST_F(PackTest, OutputInsideTheDirectoryIsNotPackedIntoItself) {
  make_project(tmp_.path());
  PackOptions options;
  options.output_path = tmp_ / "ws.tar.gz";
  auto packed = pack_workspace(tmp_.path(), options);
  ASSERT_TRUE(packed);
  EXPECT_THAT(paths_of(entries_of(packed->archive_path)), Not(::testing::Contains("ws.tar.gz")));
}

TEST_F(PackTest, LinksInsideAreKeptLinksOutsideAreSkippedAndReported) {
  make_project(tmp_.path());
  ::symlink("model/net.py", (tmp_ / "src/net.py").c_str());
  ::symlink("../train.py", (tmp_ / "src/train.py").c_str());
  ::symlink("/etc/passwd", (tmp_ / "passwd").c_str());
  ::symlink("../outside", (tmp_ / "up").c_str());
  ::symlink("src/../../x", (tmp_ / "tricky").c_str());
  ::mkfifo((tmp_ / "pipe").c_str(), 0644);
  auto packed = pack(tmp_.path());
  ASSERT_TRUE(packed);
  auto entries = entries_of(packed->archive_path);
  auto paths = paths_of(entries);
  EXPECT_THAT(paths, ::testing::IsSupersetOf({"src/net.py", "src/train.py"}));
  EXPECT_THAT(paths, Not(::testing::Contains("passwd")));
  EXPECT_THAT(paths, Not(::testing::Contains("up")));
  EXPECT_THAT(paths, Not(::testing::Contains("pipe")));
  std::vector<std::string> skipped;
  for (const auto& s : packed->skipped) skipped.push_back(s.path + ": " + s.reason);
  EXPECT_THAT(skipped, ElementsAre(HasSubstr("passwd: a symbolic link that points to the absolute path \"/etc/passwd\""),
                                   HasSubstr("pipe: a named pipe"), HasSubstr("tricky: a symbolic link"),
                                   HasSubstr("up: a symbolic link that points to \"../outside\", outside")));
  std::string dest = out_ / "unpacked";
  ASSERT_TRUE(unpack_workspace(packed->archive_path, packed->digest, dest));
  EXPECT_EQ(read_file(dest + "/src/net.py"), "class Net: pass\n");  // through the restored link
}

TEST_F(PackTest, OverTheSizeLimitNamesTheNumbersAndTheFiveBiggestFiles) {
  write_file(tmp_ / "a.bin", std::string(600, 'a'));
  write_file(tmp_ / "b.bin", std::string(500, 'b'));
  write_file(tmp_ / "data/c.bin", std::string(400, 'c'));
  write_file(tmp_ / "d.bin", std::string(300, 'd'));
  write_file(tmp_ / "e.bin", std::string(200, 'e'));
  write_file(tmp_ / "f.bin", std::string(100, 'f'));
  PackOptions options;
  options.max_content_bytes = 1000;
  auto packed = pack(tmp_.path(), "ws.tar.gz", options);
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kTooLarge);
  EXPECT_EQ(packed.error().field, "dir");
  std::string message = packed.error().message;
  EXPECT_THAT(message, HasSubstr("holds 2.1 KiB (2100 bytes) of files"));
  EXPECT_THAT(message, HasSubstr("limit of 1000 bytes"));
  EXPECT_THAT(message, HasSubstr("a.bin (600 bytes), b.bin (500 bytes), data/c.bin (400 bytes), d.bin (300 bytes), "
                                 "e.bin (200 bytes)"));
  EXPECT_THAT(message, Not(HasSubstr("f.bin")));
  EXPECT_THAT(message, HasSubstr(".cnlabignore"));
  EXPECT_FALSE(exists_no_follow(out_ / "ws.tar.gz"));  // no half-written archive left
}

TEST_F(PackTest, OverTheEntryLimitIsRefused) {
  for (int i = 0; i < 5; ++i) write_file(tmp_ / ("f" + std::to_string(i)), "x");
  PackOptions options;
  options.max_entries = 4;
  auto packed = pack(tmp_.path(), "ws.tar.gz", options);
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kTooLarge);
  EXPECT_THAT(packed.error().message, HasSubstr("5 files, directories and links, over the limit of 4"));
}

TEST_F(PackTest, OverTheArchiveLimitIsRefused) {
  std::string noise;
  for (int i = 0; i < 20000; ++i) noise += static_cast<char>((i * 7919 + (i >> 3) * 31) & 0xff);
  write_file(tmp_ / "noise.bin", noise);
  PackOptions options;
  options.max_archive_bytes = 4096;
  auto packed = pack(tmp_.path(), "ws.tar.gz", options);
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kTooLarge);
  EXPECT_THAT(packed.error().message, HasSubstr("over the limit of 4.0 KiB (4096 bytes) for an upload"));
  EXPECT_FALSE(exists_no_follow(out_ / "ws.tar.gz"));
}

TEST_F(PackTest, LevelZeroWritesAPlainTarThatUnpacks) {
  // Memory-like content: compressible, so level 6 shrinks it and level 0 (no gzip) does not.
  std::string pages;
  for (int i = 0; i < 1 << 18; ++i) pages += static_cast<char>(i % 7 == 0 ? i & 0xff : 0);
  write_file(tmp_ / "pages-1.img", pages);
  PackOptions stored_options;
  stored_options.compression_level = 0;
  auto stored = pack(tmp_.path(), "stored.tar.gz", stored_options);
  auto compressed = pack(tmp_.path(), "compressed.tar.gz");
  ASSERT_TRUE(stored) << stored.error().to_string();
  ASSERT_TRUE(compressed) << compressed.error().to_string();
  EXPECT_GT(stored->archive_bytes, static_cast<int64_t>(pages.size()));
  EXPECT_LT(compressed->archive_bytes, static_cast<int64_t>(pages.size()) / 4);
  EXPECT_NE(stored->digest, compressed->digest);
  EXPECT_NE(read_file(stored->archive_path).substr(0, 2), "\x1f\x8b") << "no gzip header";
  EXPECT_EQ(read_file(compressed->archive_path).substr(0, 2), "\x1f\x8b");
  std::string dest = out_ / "unpacked";
  auto unpacked = unpack_workspace(stored->archive_path, stored->digest, dest);
  ASSERT_TRUE(unpacked) << unpacked.error().to_string();
  EXPECT_TRUE(read_file(dest + "/pages-1.img") == pages);
}

TEST_F(PackTest, ACompressionLevelOutsideGzipsIsRefused) {
  make_project(tmp_.path());
  PackOptions options;
  options.compression_level = 10;
  auto packed = pack(tmp_.path(), "ws.tar.gz", options);
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(packed.error().field, "compression_level");
  EXPECT_EQ(packed.error().value, "10");
}

TEST_F(PackTest, MissingDirectoryIsAnInvalidArgument) {
  auto packed = pack(tmp_ / "nope");
  ASSERT_FALSE(packed);
  EXPECT_EQ(packed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(packed.error().field, "dir");
}

TEST_F(PackTest, NonAsciiNamesRoundTrip) {
  write_file(tmp_ / "données/été.txt", "chaud");
  auto packed = pack(tmp_.path());
  ASSERT_TRUE(packed);
  std::string dest = out_ / "unpacked";
  auto unpacked = unpack_workspace(packed->archive_path, packed->digest, dest);
  ASSERT_TRUE(unpacked) << unpacked.error().to_string();
  EXPECT_EQ(read_file(dest + "/données/été.txt"), "chaud");
}

}  // namespace
}  // namespace cnlab::agent
