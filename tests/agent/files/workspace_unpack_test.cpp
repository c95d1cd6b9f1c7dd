#include "agent/files/workspace_unpack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include "agent/files/digest.h"
#include "agent/files/workspace_pack.h"
#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::ArchiveBuilder;
using test_support::exists_no_follow;
using test_support::names_in;
using test_support::read_file;
using test_support::TempDir;
using test_support::write_file;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class UnpackTest : public ::testing::Test {
 protected:
  std::string archive() const { return tmp_ / "ws.tar.gz"; }
  std::string dest() const { return tmp_ / "job/work"; }
  void SetUp() override { std::filesystem::create_directories(tmp_ / "job"); }

  // Extracts archive() into dest() (created by the call) and expects a refusal: `field`, the
  // entry's path as `value`, `rule` in the message; the destination is gone and nothing was
  // written next to it.
  void expect_refused(ErrorCode code, const std::string& field, const std::string& value, const std::string& rule,
                      const UnpackLimits& limits = {}) {
    auto digest = sha256_file(archive());
    ASSERT_TRUE(digest);
    auto result = unpack_workspace(archive(), *digest, dest(), limits);
    ASSERT_FALSE(result) << "extracted " << result->entry_count << " entries";
    EXPECT_EQ(result.error().code, code) << result.error().to_string();
    EXPECT_EQ(result.error().field, field);
    EXPECT_EQ(result.error().value, value);
    EXPECT_THAT(result.error().message, HasSubstr(rule));
    EXPECT_FALSE(exists_no_follow(dest())) << "the destination was not cleaned";
    EXPECT_THAT(names_in(tmp_ / "job"), ElementsAre()) << "something was written outside the destination";
    EXPECT_THAT(names_in(tmp_.path()), ElementsAre("job", "ws.tar.gz"));
  }

  TempDir tmp_;
};

TEST_F(UnpackTest, PackedWorkspaceRoundTrips) {
  TempDir src;
  write_file(src / "a.txt", "alpha");
  write_file(src / "deep/er/b.bin", std::string(100000, 'b'));
  write_file(src / "bin/tool", "#!/bin/sh\n", 0750);
  std::filesystem::create_directories(src / "empty/dir");
  ::symlink("../a.txt", (src / "deep/link").c_str());
  PackOptions options;
  options.output_path = archive();
  auto packed = pack_workspace(src.path(), options);
  ASSERT_TRUE(packed);
  auto result = unpack_workspace(archive(), packed->digest, dest());
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->file_count, 3);
  EXPECT_EQ(result->content_bytes, 5 + 100000 + 10);
  EXPECT_EQ(result->entry_count, packed->entry_count);
  EXPECT_EQ(read_file(dest() + "/a.txt"), "alpha");
  EXPECT_EQ(read_file(dest() + "/deep/er/b.bin"), std::string(100000, 'b'));
  EXPECT_EQ(test_support::mode_of(dest() + "/bin/tool") & 0777, 0750u);
  EXPECT_TRUE(std::filesystem::is_directory(dest() + "/empty/dir"));
  EXPECT_EQ(std::filesystem::read_symlink(dest() + "/deep/link"), "../a.txt");
}

TEST_F(UnpackTest, PlainTarIsAccepted) {
  ArchiveBuilder(archive(), ArchiveBuilder::Compression::kNone).file("x/y.txt", "plain");
  auto result = extract_workspace(archive(), dest());
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(read_file(dest() + "/x/y.txt"), "plain");
}

TEST_F(UnpackTest, DotSlashPrefixedNamesAreAccepted) {
  ArchiveBuilder(archive()).dir("./").file("./a.txt", "a").dir("./sub/").file("./sub/b.txt", "b");
  auto result = extract_workspace(archive(), dest());
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(read_file(dest() + "/sub/b.txt"), "b");
}

TEST_F(UnpackTest, EmptyExistingDestinationIsUsedAndKeptOnRefusal) {
  std::filesystem::create_directories(dest());
  ArchiveBuilder(archive()).file("ok.txt", "fine").file("../evil", "x");
  auto result = extract_workspace(archive(), dest());
  ASSERT_FALSE(result);
  EXPECT_TRUE(std::filesystem::is_directory(dest()));
  EXPECT_THAT(names_in(dest()), ElementsAre());
}

TEST_F(UnpackTest, NonEmptyDestinationIsRefused) {
  write_file(dest() + "/left.txt", "from before");
  ArchiveBuilder(archive()).file("a.txt", "a");
  auto result = extract_workspace(archive(), dest());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "dest_dir");
  EXPECT_THAT(result.error().message, HasSubstr("empty or absent"));
  EXPECT_EQ(read_file(dest() + "/left.txt"), "from before");
}

TEST_F(UnpackTest, DotDotEntryIsRefused) {
  ArchiveBuilder(archive()).file("ok.txt", "fine").file("../evil", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "../evil", "has a \"..\" segment");
}

TEST_F(UnpackTest, AbsoluteEntryIsRefused) {
  ArchiveBuilder(archive()).file("/etc/x", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "/etc/x", "is an absolute path");
}

TEST_F(UnpackTest, DotDotInTheMiddleIsRefused) {
  ArchiveBuilder(archive()).dir("a").file("a/../../x", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "a/../../x", "has a \"..\" segment");
}

TEST_F(UnpackTest, SymlinkToEtcIsRefused) {
  ArchiveBuilder(archive()).symlink("link", "/etc").file("link/x", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "link",
                 "points to the absolute path \"/etc\", outside the workspace");
}

TEST_F(UnpackTest, SymlinkClimbingOutIsRefused) {
  ArchiveBuilder(archive()).dir("a").symlink("a/up", "../../x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "a/up", "points to \"../../x\", outside the workspace");
}

TEST_F(UnpackTest, SymlinkWithDotDotAfterANameIsRefused) {
  // "s -> ." then "t -> s/../x": lexically "x", really one level above the workspace.
  ArchiveBuilder(archive()).symlink("s", ".").symlink("t", "s/../x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "t", "\"..\" after a name");
}

TEST_F(UnpackTest, WriteThroughAnInsideSymlinkIsRefused) {
  ArchiveBuilder(archive()).dir("real").symlink("alias", "real").file("alias/x", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "alias/x",
                 "would be written through the symbolic link \"alias\"");
}

TEST_F(UnpackTest, EntryReplacingASymlinkIsRefused) {
  ArchiveBuilder(archive()).symlink("a", "b").file("a", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "a", "appears twice");
}

TEST_F(UnpackTest, HardLinkToEtcPasswdIsRefused) {
  ArchiveBuilder(archive()).hardlink("h", "/etc/passwd");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "h", "is a hard link to \"/etc/passwd\", which is an absolute path");
}

TEST_F(UnpackTest, HardLinkToAnythingButAnEarlierFileIsRefused) {
  ArchiveBuilder(archive()).hardlink("h", "later.txt").file("later.txt", "x");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "h", "not a file extracted earlier from this archive");
}

TEST_F(UnpackTest, HardLinkToAnEarlierFileWorks) {
  ArchiveBuilder(archive()).file("a.txt", "shared").hardlink("sub/b.txt", "a.txt");
  auto result = extract_workspace(archive(), dest());
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(read_file(dest() + "/sub/b.txt"), "shared");
}

TEST_F(UnpackTest, DeviceNodeIsRefused) {
  ArchiveBuilder(archive()).special("null", AE_IFCHR);
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "null", "a character device; workspaces hold only");
}

TEST_F(UnpackTest, FifoIsRefused) {
  ArchiveBuilder(archive()).special("pipe", AE_IFIFO);
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "pipe", "a named pipe");
}

TEST_F(UnpackTest, SetuidFileIsRefused) {
  ArchiveBuilder(archive()).file("su", "x", 04755);
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "su", "setuid or setgid bit (mode 4755)");
}

TEST_F(UnpackTest, DuplicateFileIsRefused) {
  ArchiveBuilder(archive()).file("a", "1").file("a", "2");
  expect_refused(ErrorCode::kInvalidArgument, "archive entry", "a", "appears twice");
}

TEST_F(UnpackTest, BombOverTheByteLimitIsStopped) {
  ArchiveBuilder(archive()).zeros("bomb.bin", 8 << 20);  // 8 MiB of zeros: a few KiB compressed
  ASSERT_LT(std::filesystem::file_size(archive()), 64u << 10);
  expect_refused(ErrorCode::kTooLarge, "archive entry", "bomb.bin", "more than 1.0 MiB (1048576 bytes) of files",
                 {.max_content_bytes = 1 << 20});
}

TEST_F(UnpackTest, BytesAreCountedAcrossFiles) {
  ArchiveBuilder builder(archive());
  for (int i = 0; i < 20; ++i) builder.zeros("part" + std::to_string(i), 100 << 10);
  builder.close();
  expect_refused(ErrorCode::kTooLarge, "archive entry", "part10", "(1024000 already written)",
                 {.max_content_bytes = 1 << 20});
}

TEST_F(UnpackTest, TooManyEntriesAreRefused) {
  ArchiveBuilder builder(archive());
  for (int i = 0; i < 11; ++i) builder.file("f" + std::to_string(i), "x");
  builder.close();
  expect_refused(ErrorCode::kTooLarge, "archive", archive(), "more than 10 entries", {.max_entries = 10});
}

TEST_F(UnpackTest, WrongDigestIsRefusedBeforeAnythingIsWritten) {
  ArchiveBuilder(archive()).file("a.txt", "a");
  std::string wrong = "sha256:" + std::string(64, '0');
  auto result = unpack_workspace(archive(), wrong, dest());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().field, "digest");
  EXPECT_EQ(result.error().value, wrong);
  EXPECT_THAT(result.error().message, HasSubstr("has digest sha256:"));
  EXPECT_FALSE(exists_no_follow(dest()));
}

TEST_F(UnpackTest, MalformedDigestIsRefused) {
  ArchiveBuilder(archive()).file("a.txt", "a");
  auto result = unpack_workspace(archive(), "md5:abc", dest());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(result.error().message, HasSubstr("64 lowercase hex digits"));
}

TEST_F(UnpackTest, NonArchiveFileIsRefused) {
  write_file(archive(), "this is not an archive, just some text that goes on for a while.\n");
  expect_refused(ErrorCode::kInvalidArgument, "archive", archive(), "not a workspace archive (a tar, gzip-compressed or plain)");
}

TEST_F(UnpackTest, EmptyFileIsRefused) {
  write_file(archive(), "");
  expect_refused(ErrorCode::kInvalidArgument, "archive", archive(), "it is empty");
}

TEST_F(UnpackTest, ZipArchiveIsRefusedByName) {
  ArchiveBuilder(archive(), ArchiveBuilder::Compression::kNone, ArchiveBuilder::Format::kZip).file("a.txt", "a");
  expect_refused(ErrorCode::kInvalidArgument, "archive", archive(), "looks like a zip archive");
}

TEST_F(UnpackTest, TruncatedArchiveIsRefusedAndCleaned) {
  ArchiveBuilder(archive()).file("a.txt", "a").file("b.bin", std::string(200000, 'q') + "tail" + std::string(200000, 'z'));
  std::string bytes = read_file(archive());
  write_file(archive(), bytes.substr(0, bytes.size() / 2));
  auto digest = sha256_file(archive());
  auto result = unpack_workspace(archive(), *digest, dest());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(exists_no_follow(dest()));
}

TEST_F(UnpackTest, ConcurrentExtractionsDoNotDisturbEachOther) {
  ArchiveBuilder builder(archive());
  for (int i = 0; i < 30; ++i) builder.file("d" + std::to_string(i % 5) + "/f" + std::to_string(i), std::to_string(i));
  builder.close();
  std::vector<std::thread> threads;
  std::vector<char> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { ok[t] = extract_workspace(archive(), tmp_ / ("job/w" + std::to_string(t))).has_value() ? 1 : 0; });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(ok[t]);
    EXPECT_EQ(read_file(tmp_ / ("job/w" + std::to_string(t) + "/d2/f17")), "17");
  }
}

TEST(VerifyDigest, MatchingFilePasses) {
  TempDir tmp;
  write_file(tmp / "f", "abc");
  EXPECT_TRUE(verify_digest(tmp / "f", "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  auto missing = verify_digest(tmp / "nope", "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace cnlab::agent
