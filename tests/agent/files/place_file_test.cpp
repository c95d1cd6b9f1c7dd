// place_file: a file another node named the place of goes there and nowhere else.
#include "agent/files/place_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::exists_no_follow;
using test_support::read_file;
using test_support::TempDir;
using test_support::write_file;

TEST(PlaceFile, MovesTheFileToItsPathWithItsMode) {
  TempDir tmp;
  write_file(tmp / "part", "pages", 0600);
  std::filesystem::create_directories(tmp / "dump/images");
  ASSERT_TRUE(place_file(tmp / "part", tmp / "dump", "images/pages-1.img", 0755));
  EXPECT_EQ(read_file(tmp / "dump/images/pages-1.img"), "pages");
  EXPECT_FALSE(exists_no_follow(tmp / "part")) << "moved, not copied";
  struct stat st {};
  ASSERT_EQ(::stat((tmp / "dump/images/pages-1.img").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST(PlaceFile, RefusesPathsThatLeaveTheDirectoryOrGoThroughALink) {
  TempDir tmp, outside;
  write_file(tmp / "part", "pages");
  std::filesystem::create_directories(tmp / "dump/images");
  std::filesystem::create_directory_symlink(outside.path(), tmp / "dump/escape");
  for (const std::string path : {"../part2", "/etc/x", "images/../../x", "escape/x", "missing/x", "", "images/",
                                 "./images/x", "images//x"}) {
    auto placed = place_file(tmp / "part", tmp / "dump", path, 0644);
    ASSERT_FALSE(placed) << path;
    EXPECT_EQ(placed.error().code, ErrorCode::kInvalidArgument) << path;
    EXPECT_EQ(placed.error().field, "path") << path;
  }
  EXPECT_TRUE(std::filesystem::is_empty(outside.path())) << "nothing written through the link";
  EXPECT_EQ(read_file(tmp / "part"), "pages") << "the file stays where it was";
}

TEST(PlaceFile, NeverReplacesWhatIsThere) {
  TempDir tmp;
  write_file(tmp / "part", "new");
  write_file(tmp / "dump/kept", "old");
  auto placed = place_file(tmp / "part", tmp / "dump", "kept", 0644);
  ASSERT_FALSE(placed);
  EXPECT_EQ(placed.error().field, "path");
  EXPECT_EQ(read_file(tmp / "dump/kept"), "old");
  EXPECT_EQ(read_file(tmp / "part"), "new");
  ::symlink("/etc/passwd", (tmp / "link").c_str());
  auto linked = place_file(tmp / "link", tmp / "dump", "other", 0644);
  ASSERT_FALSE(linked);
  EXPECT_EQ(linked.error().field, "file") << "only a regular file moves";
}

}  // namespace
}  // namespace cnlab::agent
