// Cgroup discovery and job cgroups: mountinfo parsing and v2 writes on fake trees (this machine's
// cgroup2 mount has no controllers), and v1 for real where the machine has it.
#include "agent/runtime/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"

namespace cnlab::agent::cgroups {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::read_text;
using testing::TempDir;
namespace fs = std::filesystem;

constexpr const char* kHybridMountinfo =
    "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 "
    "rw,nsdelegate\n"
    "35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd\n"
    "38 33 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:14 - cgroup cgroup rw,cpu,cpuacct\n"
    "39 33 0:34 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory\n"
    "40 33 0:35 / /sys/fs/cgroup/pids rw,nosuid shared:16 - cgroup cgroup rw,pids\n"
    "41 33 0:36 / /mnt/with\\040space rw shared:17 - cgroup cgroup rw,freezer\n";

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST(Mountinfo, FindsTheUnifiedMountAndEachV1Controller) {
  const Mounts mounts = parse_mountinfo(kHybridMountinfo);
  ASSERT_TRUE(mounts.unified);
  EXPECT_EQ(*mounts.unified, "/sys/fs/cgroup/unified");
  EXPECT_EQ(mounts.v1.at("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(mounts.v1.at("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(mounts.v1.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(mounts.v1.at("pids"), "/sys/fs/cgroup/pids");
  EXPECT_EQ(mounts.v1.at("freezer"), "/mnt/with space");
  EXPECT_EQ(mounts.v1.count("name=systemd"), 0u);
  EXPECT_EQ(mounts.v1.count("xattr"), 0u);
}

TEST(Detect, UnifiedHierarchyWithoutControllersFallsBackToV1) {
  TempDir root;
  const fs::path unified = root.path() / "unified";
  fs::create_directories(unified);
  write(unified / "cgroup.controllers", "hugetlb\n");
  Mounts mounts;
  mounts.unified = unified;
  for (const char* c : {"memory", "cpu", "pids", "freezer"}) {
    fs::create_directories(root.path() / c);
    mounts.v1[c] = root.path() / c;
  }
  const Layout layout = detect(mounts, "cnlab");
  EXPECT_EQ(layout.version, CgroupVersion::kV1);
  EXPECT_TRUE(layout.memory && layout.cpu && layout.pids && layout.freezer);
  EXPECT_TRUE(fs::is_directory(root.path() / "memory" / "cnlab"));
  // The fake memory hierarchy has no memory.memsw.limit_in_bytes: swap cannot be kept off.
  EXPECT_FALSE(layout.swap);
  EXPECT_THAT(layout.reason, HasSubstr("offers none of cpu, memory, pids"));
  EXPECT_THAT(layout.reason, HasSubstr("swap accounting off"));
}

TEST(Detect, NothingMountedMeansNoCgroupsWithAReason) {
  const Layout layout = detect(Mounts{}, "cnlab");
  EXPECT_EQ(layout.version, CgroupVersion::kNone);
  EXPECT_THAT(layout.reason, HasSubstr("no cgroup v1 hierarchy with memory"));
}

// The kernel's v2 interface files, as plain files.
fs::path fake_v2_job(const fs::path& parent, const std::string& name) {
  const fs::path dir = parent / name;
  fs::create_directories(dir);
  for (const char* file :
       {"cpu.max", "memory.max", "memory.swap.max", "memory.oom.group", "pids.max", "cgroup.procs"}) {
    write(dir / file, "");
  }
  write(dir / "memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n");
  return dir;
}

TEST(CreateV2, WritesCpuMaxMemoryMaxSwapOffOomGroupAndPidsMax) {
  TempDir root;
  Layout layout;
  layout.version = CgroupVersion::kV2;
  layout.v2_parent = root.path();
  layout.cpu = layout.memory = layout.pids = true;
  const fs::path dir = fake_v2_job(root.path(), "job-1");
  auto cgroup = create(layout, "job-1", {.cpu_milli = 1500, .memory_bytes = 64 << 20, .pids = 10}, 1);
  ASSERT_TRUE(cgroup) << cgroup.error().to_string();
  EXPECT_EQ(read_text(dir / "cpu.max"), "150000 100000");
  EXPECT_EQ(read_text(dir / "memory.max"), "67108864");
  EXPECT_EQ(read_text(dir / "memory.swap.max"), "0");
  EXPECT_EQ(read_text(dir / "memory.oom.group"), "1");
  EXPECT_EQ(read_text(dir / "pids.max"), "11");
  EXPECT_TRUE(cgroup->cpu_limit && cgroup->memory_limit && cgroup->swap_limit && cgroup->pids_limit);
  EXPECT_EQ(cgroup->oom_kills(), 2);
  ASSERT_EQ(cgroup->dirs.size(), 1u);
  EXPECT_EQ(cgroup->procs_dir(), dir);
}

TEST(CreateV2, NoLimitIsWrittenAsMaxSoALeftoverCgroupIsReset) {
  TempDir root;
  Layout layout;
  layout.version = CgroupVersion::kV2;
  layout.v2_parent = root.path();
  layout.cpu = layout.memory = layout.pids = true;
  const fs::path dir = fake_v2_job(root.path(), "job-2");
  write(dir / "memory.max", "1048576");  // from an earlier run of the same name
  auto cgroup = create(layout, "job-2", {}, 1);
  ASSERT_TRUE(cgroup) << cgroup.error().to_string();
  EXPECT_EQ(read_text(dir / "cpu.max"), "max 100000");
  EXPECT_EQ(read_text(dir / "memory.max"), "max");
  EXPECT_EQ(read_text(dir / "pids.max"), "max");
  EXPECT_FALSE(cgroup->memory_limit);
}

TEST(CreateV2, CgroupStillHoldingProcessesIsRefused) {
  TempDir root;
  Layout layout;
  layout.version = CgroupVersion::kV2;
  layout.v2_parent = root.path();
  layout.memory = true;
  const fs::path dir = fake_v2_job(root.path(), "busy");
  write(dir / "cgroup.procs", "4242\n");
  auto cgroup = create(layout, "busy", {}, 0);
  ASSERT_FALSE(cgroup);
  EXPECT_EQ(cgroup.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(cgroup.error().field, "cgroup_name");
}

TEST(JobCgroupJson, RoundTripsAndRefusesRelativeDirectories) {
  JobCgroup cgroup;
  cgroup.version = CgroupVersion::kV1;
  cgroup.dirs = {"/sys/fs/cgroup/memory/cnlab/j", "/sys/fs/cgroup/pids/cnlab/j"};
  cgroup.memory_dir = cgroup.dirs[0];
  cgroup.memory_limit = true;
  auto back = from_json(to_json(cgroup), "cgroup");
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->dirs, cgroup.dirs);
  EXPECT_EQ(back->memory_dir, cgroup.memory_dir);
  EXPECT_TRUE(back->memory_limit);
  EXPECT_FALSE(back->pids_limit);

  Json bad = to_json(cgroup);
  bad["dirs"] = Json::array({"relative/dir"});
  auto refused = from_json(bad, "cgroup");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "cgroup.dirs");
}

// The real thing: this machine's v1 hierarchies.
class RealV1Cgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root to create real cgroups (CI runs as root, so it runs there; detection and "
                      "the v2 limit files are tested unprivileged above, on mountinfo text and a fake tree)";
    }
    auto mountinfo = read_file("/proc/self/mountinfo");
    ASSERT_TRUE(mountinfo);
    layout_ = detect(parse_mountinfo(*mountinfo), parent_);
    if (layout_.version != CgroupVersion::kV1) {
      GTEST_SKIP() << "this machine has no usable cgroup v1 hierarchies (" << layout_.reason
                   << "); v1 is what this test exercises, and detection falling back from v2 is tested above";
    }
  }
  void TearDown() override {
    for (const auto& [controller, dir] : layout_.v1_parents) ::rmdir(dir.c_str());
  }
  std::string parent_ = "cnlab-test-" + std::to_string(::getpid());
  Layout layout_;
};

TEST_F(RealV1Cgroups, LimitsAreWrittenAndKillAllEmptiesAFrozenTree) {
  auto cgroup = create(layout_, "job", {.cpu_milli = 500, .memory_bytes = 128 << 20, .pids = 10}, 1);
  ASSERT_TRUE(cgroup) << cgroup.error().to_string();
  const auto dir_of = [&](const char* c) { return layout_.v1_parents.at(c) / "job"; };
  EXPECT_EQ(read_text(dir_of("cpu") / "cpu.cfs_quota_us"), "50000");
  EXPECT_EQ(read_text(dir_of("memory") / "memory.limit_in_bytes"), "134217728");
  if (layout_.swap) {
    EXPECT_EQ(read_text(dir_of("memory") / "memory.memsw.limit_in_bytes"), "134217728");
  }
  EXPECT_EQ(read_text(dir_of("pids") / "pids.max"), "11");

  // A child that joins and forks a grandchild; both must die. As a subreaper this process gets to
  // reap the orphaned grandchild too.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!cgroup->join_self()) ::_exit(3);
    if (::fork() == 0) {
      ::pause();
      ::_exit(0);
    }
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_EQ(cgroup->procs().size(), 2u);
  const auto status = cgroup->kill_all(2000ms);
  EXPECT_TRUE(status) << status.error().to_string();
  EXPECT_TRUE(cgroup->procs().empty());
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wait_status));
  EXPECT_EQ(WTERMSIG(wait_status), SIGKILL);
  while (::waitpid(-1, &wait_status, WNOHANG) > 0) {
  }

  EXPECT_TRUE(cgroup->remove(1000ms));
  for (const auto& dir : cgroup->dirs) EXPECT_FALSE(fs::exists(dir)) << dir;
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace cnlab::agent::cgroups
