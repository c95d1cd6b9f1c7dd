// The built libcnlab-vgpu.so itself: what it depends on and what it exports.
#include <gmock/gmock.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), p)) > 0) out.append(buffer.data(), n);
  ::pclose(p);
  return out;
}

TEST(VgpuLibraryFile, DependsOnTheCLibraryAloneAndNotOnTheCppRuntime) {
  std::string needed = run(std::string("readelf -d ") + VGPU_LIBRARY + " | grep NEEDED");
  ASSERT_THAT(needed, ::testing::HasSubstr("libc.so.6"));
  std::istringstream in(needed);
  for (std::string line; std::getline(in, line);) {
    bool allowed = line.find("libc.so.6") != std::string::npos || line.find("libdl.so.2") != std::string::npos ||
                   line.find("libpthread.so.0") != std::string::npos || line.find("ld-linux") != std::string::npos;
    EXPECT_TRUE(allowed) << line;
  }
}

TEST(VgpuLibraryFile, ExportsOnlyTheHooksAndDlsym) {
  std::string symbols = run(std::string("nm -D --defined-only ") + VGPU_LIBRARY + " | awk '{print $3}'");
  std::istringstream in(symbols);
  int hooks = 0;
  for (std::string name; std::getline(in, name);) {
    bool allowed = name.rfind("cu", 0) == 0 || name.rfind("nvml", 0) == 0 || name == "dlsym";
    EXPECT_TRUE(allowed) << name;
    hooks += name.rfind("cu", 0) == 0;
  }
  EXPECT_GE(hooks, 50);
  for (const char* hook : {"cuMemAlloc_v2", "cuMemCreate", "cuMemAllocAsync_ptsz", "cuIpcOpenMemHandle_v2",
                           "cuGetProcAddress_v2", "cuLaunchKernel_ptsz", "nvmlDeviceGetMemoryInfo_v2"}) {
    EXPECT_NE(symbols.find(std::string(hook) + "\n"), std::string::npos) << hook;
  }
  EXPECT_EQ(symbols.find("cuGetExportTable"), std::string::npos);  // passed through, never hooked
}

}  // namespace
