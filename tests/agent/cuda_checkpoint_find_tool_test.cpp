// Where the agent finds a cuda-checkpoint (src/agent/runtime/cuda_checkpoint.h): NVIDIA's first,
// else cnlab-cuda-checkpoint beside the running executable. The fallback's rule, tool_beside(), on
// real files in a fresh directory; and find_tool() itself in a copy of this test binary run from
// such a directory (where NVIDIA's utility is installed it comes first, and that test skips).
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "agent/runtime/cuda_checkpoint.h"

namespace cnlab::agent::cuda {
namespace {

namespace fs = std::filesystem;

class ToolBeside : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cnlab-find-tool-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    exe_ = (dir_ / "cnlab").string();
    tool_ = (dir_ / "cnlab-cuda-checkpoint").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void write_tool(mode_t mode) {
    std::ofstream(tool_) << "#!/bin/sh\n";
    ::chmod(tool_.c_str(), mode);
  }

  fs::path dir_;
  std::string exe_, tool_;
};

TEST_F(ToolBeside, AnExecutableToolBesideTheExecutableIsFound) {
  write_tool(0755);
  EXPECT_EQ(tool_beside(exe_), tool_);
}

TEST_F(ToolBeside, NoToolThereFindsNothing) {
  EXPECT_EQ(tool_beside(exe_), "");
}

TEST_F(ToolBeside, AToolThatCannotBeRunIsNotFound) {
  write_tool(0644);
  EXPECT_EQ(tool_beside(exe_), "");
}

TEST_F(ToolBeside, ADirectoryOfThatNameIsNotATool) {
  fs::create_directory(tool_);
  EXPECT_EQ(tool_beside(exe_), "");
}

TEST_F(ToolBeside, OnlyTheExecutablesOwnDirectoryCounts) {
  write_tool(0755);
  fs::create_directory(dir_ / "bin");
  EXPECT_EQ(tool_beside((dir_ / "bin" / "cnlab").string()), "");
  EXPECT_EQ(tool_beside("cnlab"), "");  // no directory at all
}

std::string nvidias_utility() {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin", "/bin"}) {
    const std::string path = std::string(dir) + "/cuda-checkpoint";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// Run by itself in this binary's directory, and by the next test in a copy of this binary with
// CNLAB_EXPECT_TOOL naming the tool put beside the copy.
TEST(FindCudaCheckpoint, FindsNvidiasUtilityFirstElseTheToolBesideItsOwnExecutable) {
  if (const char* expected = std::getenv("CNLAB_EXPECT_TOOL")) {
    EXPECT_EQ(find_tool(), expected);
    return;
  }
  const std::string nvidia = nvidias_utility();
  EXPECT_EQ(find_tool(), nvidia.empty() ? tool_beside(fs::read_symlink("/proc/self/exe").string()) : nvidia);
}

TEST_F(ToolBeside, AProgramWithTheToolBesideItFindsItThroughProcSelfExe) {
  const std::string nvidia = nvidias_utility();
  if (!nvidia.empty()) GTEST_SKIP() << "NVIDIA's cuda-checkpoint is installed (" << nvidia << ") and comes first";
  const std::string copy = (dir_ / "cnlab").string();
  fs::copy_file(fs::read_symlink("/proc/self/exe"), copy);
  ::chmod(copy.c_str(), 0755);
  write_tool(0755);
  const std::string log = (dir_ / "log").string();
  const std::string command = "CNLAB_EXPECT_TOOL='" + tool_ + "' '" + copy +
                              "' --gtest_filter=FindCudaCheckpoint.FindsNvidiasUtilityFirstElseTheToolBesideItsOwnExecutable >'" +
                              log + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) GTEST_SKIP() << "cannot run a program in " << dir_ << ": " << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test."), std::string::npos) << output;
}

}  // namespace
}  // namespace cnlab::agent::cuda
