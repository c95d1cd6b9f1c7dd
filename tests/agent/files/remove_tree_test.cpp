#include "agent/files/remove_tree.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::exists_no_follow;
using test_support::read_file;
using test_support::TempDir;
using test_support::write_file;

TEST(SafeRemoveTree, LinkToAnOutsideDirectoryIsRemovedNotFollowed) {
  TempDir tmp;
  TempDir outside;
  write_file(outside / "keep/important.txt", "precious");
  write_file(tmp / "work/out/result.txt", "r");
  ::symlink(outside.path().c_str(), (tmp / "work/escape").c_str());
  ::symlink((outside / "keep").c_str(), (tmp / "work/out/escape2").c_str());
  ::symlink((outside / "keep/important.txt").c_str(), (tmp / "work/file_link").c_str());
  ASSERT_TRUE(safe_remove_tree(tmp / "work"));
  EXPECT_FALSE(exists_no_follow(tmp / "work"));
  EXPECT_EQ(read_file(outside / "keep/important.txt"), "precious");
}

TEST(SafeRemoveTree, NestedTreeWithLockedDirectoriesIsRemoved) {
  TempDir tmp;
  write_file(tmp / "work/a/b/c.txt", "c");
  write_file(tmp / "work/ro/x.txt", "x");
  write_file(tmp / "work/none/y.txt", "y");
  ::mkfifo((tmp / "work/a/pipe").c_str(), 0644);
  ::chmod((tmp / "work/ro").c_str(), 0555);
  ::chmod((tmp / "work/none").c_str(), 0000);
  ASSERT_TRUE(safe_remove_tree(tmp / "work"));
  EXPECT_FALSE(exists_no_follow(tmp / "work"));
}

TEST(SafeRemoveTree, DeepTreeIsRemovedWithoutRunningOutOfDescriptors) {
  TempDir tmp;
  std::string path = tmp / "work";
  ::mkdir(path.c_str(), 0755);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(::mkdirat(fd, "dd", 0755), 0);
    int next = ::openat(fd, "dd", O_RDONLY | O_DIRECTORY);
    ::close(fd);
    fd = next;
  }
  ::close(::openat(fd, "leaf", O_WRONLY | O_CREAT, 0644));
  ::close(fd);
  // Far fewer descriptors than levels: a walk holding one per level would fail.
  struct rlimit saved {};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  struct rlimit tight = saved;
  tight.rlim_cur = 64;
  ::setrlimit(RLIMIT_NOFILE, &tight);
  Status removed = safe_remove_tree(path);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(removed) << removed.error().to_string();
  EXPECT_FALSE(exists_no_follow(path));
}

TEST(SafeRemoveTree, AbsentDirectoryIsFine) {
  TempDir tmp;
  EXPECT_TRUE(safe_remove_tree(tmp / "never"));
}

TEST(SafeRemoveTree, DirectoryThatIsALinkLosesOnlyTheLink) {
  TempDir tmp;
  TempDir outside;
  write_file(outside / "f.txt", "kept");
  ::symlink(outside.path().c_str(), (tmp / "work").c_str());
  ASSERT_TRUE(safe_remove_tree(tmp / "work"));
  EXPECT_FALSE(exists_no_follow(tmp / "work"));
  EXPECT_EQ(read_file(outside / "f.txt"), "kept");
}

}  // namespace
}  // namespace cnlab::agent
