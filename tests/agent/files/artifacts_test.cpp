#include "agent/files/artifacts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::TempDir;
using test_support::write_file;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> paths(const ArtifactSet& set) {
  std::vector<std::string> out;
  for (const auto& f : set.files) out.push_back(f.path);
  return out;
}

std::vector<std::string> skipped(const ArtifactSet& set) {
  std::vector<std::string> out;
  for (const auto& s : set.skipped) out.push_back(s.path + ": " + s.reason);
  return out;
}

TEST(CollectArtifacts, NestedFilesWithPathsAndSizes) {
  TempDir out;
  write_file(out / "model.pt", std::string(1000, 'm'));
  write_file(out / "logs/train/events.log", "e");
  write_file(out / "logs/summary.json", "{}");
  std::filesystem::create_directories(out / "empty");
  auto set = collect_artifacts(out.path());
  ASSERT_TRUE(set) << set.error().to_string();
  EXPECT_THAT(paths(*set), ElementsAre("logs/summary.json", "logs/train/events.log", "model.pt"));
  EXPECT_EQ(set->files[2].size_bytes, 1000);
  EXPECT_EQ(set->files[2].absolute_path, out / "model.pt");
  EXPECT_EQ(set->total_bytes, 1003);
  EXPECT_THAT(set->skipped, IsEmpty());
}

TEST(CollectArtifacts, SymlinksAreSkippedAndReportedNeverFollowed) {
  TempDir out;
  TempDir outside;
  write_file(outside / "secret.txt", "secret");
  write_file(out / "real.txt", "r");
  ::symlink("/etc/passwd", (out / "passwd").c_str());
  ::symlink(outside.path().c_str(), (out / "elsewhere").c_str());
  auto set = collect_artifacts(out.path());
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre("real.txt"));
  EXPECT_THAT(skipped(*set), ElementsAre(HasSubstr("elsewhere: a symbolic link (to \"" + outside.path() + "\")"),
                                         "passwd: a symbolic link (to \"/etc/passwd\"); links are not followed"));
  EXPECT_EQ(set->skipped_count, 2);
}

TEST(CollectArtifacts, PathsTheServerRefusesAreSkipped) {
  TempDir out;
  write_file(out / "a\\b.txt", "x");
  write_file(out / "bad\\dir/inner.txt", "x");
  write_file(out / "good.txt", "x");
  auto set = collect_artifacts(out.path());
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre("good.txt"));
  EXPECT_THAT(skipped(*set), ElementsAre(HasSubstr("a\\b.txt: its path contains a backslash"),
                                         HasSubstr("bad\\dir: a directory: its path contains a backslash")));
}

TEST(CollectArtifacts, FifosAndDevicesAreSkipped) {
  TempDir out;
  ::mkfifo((out / "pipe").c_str(), 0644);
  auto set = collect_artifacts(out.path());
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), IsEmpty());
  EXPECT_THAT(skipped(*set), ElementsAre("pipe: a named pipe (fifo); only regular files are uploaded"));
}

TEST(CollectArtifacts, DirectoriesDeeperThanTheServerKeepsAreSkippedWhole) {
  TempDir out;
  std::string rel;
  for (int i = 0; i < 40; ++i) rel += (i ? "/" : "") + std::string("d");
  write_file(out / (rel + "/deep.txt"), "x");
  std::string ok_rel;
  for (int i = 0; i < 31; ++i) ok_rel += "e/";
  write_file(out / (ok_rel + "at32.txt"), "x");  // 32 segments: the most the server keeps
  auto set = collect_artifacts(out.path());
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre(ok_rel + "at32.txt"));
  ASSERT_EQ(set->skipped.size(), 1u);
  EXPECT_EQ(std::count(set->skipped[0].path.begin(), set->skipped[0].path.end(), '/'), 31);
  EXPECT_THAT(set->skipped[0].reason, HasSubstr("at most 32 segments"));
}

TEST(CollectArtifacts, FileCountLimitTakesTheFirstAndReportsTheRest) {
  TempDir out;
  for (int i = 0; i < 5; ++i) write_file(out / ("f" + std::to_string(i)), "x");
  auto set = collect_artifacts(out.path(), {.max_files = 3});
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre("f0", "f1", "f2"));
  EXPECT_THAT(skipped(*set), ElementsAre("f3: past the limit of 3 files per job", "f4: past the limit of 3 files per job"));
}

TEST(CollectArtifacts, TotalLimitStillTakesSmallerFilesThatFit) {
  TempDir out;
  write_file(out / "a", std::string(600, 'a'));
  write_file(out / "b", std::string(600, 'b'));
  write_file(out / "c", std::string(300, 'c'));
  auto set = collect_artifacts(out.path(), {.max_total_bytes = 1000});
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre("a", "c"));
  EXPECT_EQ(set->total_bytes, 900);
  EXPECT_THAT(skipped(*set), ElementsAre("b: 600 bytes, which would bring the job's artifacts to 1.2 KiB (1200 bytes), "
                                         "over the limit of 1000 bytes"));
}

TEST(CollectArtifacts, SingleFileLimit) {
  TempDir out;
  write_file(out / "huge", std::string(5000, 'h'));
  write_file(out / "small", "s");
  auto set = collect_artifacts(out.path(), {.max_file_bytes = 4096});
  ASSERT_TRUE(set);
  EXPECT_THAT(paths(*set), ElementsAre("small"));
  EXPECT_THAT(skipped(*set), ElementsAre("huge: 4.9 KiB (5000 bytes), over the limit of 4.0 KiB (4096 bytes) for one file"));
}

TEST(CollectArtifacts, SkippedListIsCappedButCounted) {
  TempDir out;
  for (int i = 0; i < 10; ++i) ::symlink("/etc/passwd", (out / ("l" + std::to_string(i))).c_str());
  auto set = collect_artifacts(out.path(), {.max_skipped_listed = 4});
  ASSERT_TRUE(set);
  EXPECT_EQ(set->skipped.size(), 4u);
  EXPECT_EQ(set->skipped_count, 10);
}

TEST(CollectArtifacts, MissingOrLinkedDirectoryIsAnError) {
  TempDir tmp;
  auto missing = collect_artifacts(tmp / "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  ::symlink("/etc", (tmp / "link").c_str());
  auto linked = collect_artifacts(tmp / "link");
  ASSERT_FALSE(linked);
  EXPECT_EQ(linked.error().code, ErrorCode::kInvalidArgument);
}

TEST(OpenArtifact, ReadsARegularFileAndRefusesLinks) {
  TempDir out;
  write_file(out / "sub/a.txt", "hello");
  ::symlink("/etc", (out / "etc").c_str());
  ::symlink("/etc/passwd", (out / "sub/pw").c_str());
  auto fd = open_artifact(out.path(), "sub/a.txt");
  ASSERT_TRUE(fd) << fd.error().to_string();
  char buffer[16] = {};
  EXPECT_EQ(::read(fd->get(), buffer, sizeof buffer), 5);
  EXPECT_STREQ(buffer, "hello");
  auto through = open_artifact(out.path(), "etc/passwd");
  ASSERT_FALSE(through);
  EXPECT_EQ(through.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(open_artifact(out.path(), "sub/pw"));
  auto bad = open_artifact(out.path(), "../x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace cnlab::agent
