// The shared region: real files, real processes (fork), real record locks.
#include "vgpu/region.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace cnlab::vgpu {
namespace {

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vgpu-region-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { (void)!std::system(("rm -rf " + dir_).c_str()); }
  std::string path(const char* name) const { return dir_ + "/" + name; }
  std::string dir_;
};

// A child process that claims a slot in the tenant region at `path`, charges `bytes` on GPU 0,
// writes one byte to `ready`, then waits to be killed (or exits at once with `exit_after`).
pid_t child_holding(const std::string& path, uint64_t bytes, int ready, bool exit_after) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  Mapped<TenantRegion> t;
  if (open_tenant(path.c_str(), false, 0, "", &t) != RegionError::kOk) ::_exit(3);
  int slot = claim_proc_slot(t.region, t.fd, ::getpid(), 1);
  if (slot < 0 || !try_charge(t.region, 0, slot, bytes, kUnlimited)) ::_exit(4);
  char c = static_cast<char>('0' + slot);
  (void)!::write(ready, &c, 1);
  if (exit_after) {
    release_proc_slot(t.region, t.fd, slot);
    ::_exit(0);
  }
  for (;;) ::pause();
}

TEST_F(RegionTest, TwoProcessesCreatingATenantAtOnceAgreeOnOneRegion) {
  std::string file = path("t");
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      Mapped<TenantRegion> t;
      ::_exit(open_tenant(file.c_str(), true, 0644, "train-1", &t) == RegionError::kOk ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant_readonly(file.c_str(), &t), RegionError::kOk);
  EXPECT_STREQ(t.region->id, "train-1");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  unmap(&t);
}

TEST_F(RegionTest, AFileThatIsNotARegionIsRefusedByName) {
  std::string file = path("junk");
  (void)!std::system(("head -c 200000 /dev/urandom > " + file).c_str());
  Mapped<TenantRegion> t;
  EXPECT_EQ(open_tenant_readonly(file.c_str(), &t), RegionError::kBadMagic);
  Mapped<LimitsRegion> l;
  EXPECT_EQ(open_limits(path("absent").c_str(), false, &l), RegionError::kMissing);
  EXPECT_STREQ(region_error_text(RegionError::kBadMagic), "the file is not a CNLab vGPU region");
}

TEST_F(RegionTest, TheTenantsUsageIsTheSumOfItsLiveProcessesAndAKilledOneIsReaped) {
  std::string file = path("t");
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant(file.c_str(), true, 0644, "train-1", &t), RegionError::kOk);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t a = child_holding(file, 300, ready[1], false);
  pid_t b = child_holding(file, 200, ready[1], false);
  char slots[2];
  ASSERT_EQ(::read(ready[0], &slots[0], 1), 1);
  ASSERT_EQ(::read(ready[0], &slots[1], 1), 1);
  EXPECT_NE(slots[0], slots[1]);
  EXPECT_EQ(tenant_usage(t.region, 0), 500u);
  EXPECT_EQ(reap_dead_procs(t.region, t.fd, -1), 0);  // both alive

  ::kill(a, SIGKILL);  // dies holding its 300 bytes
  ::waitpid(a, nullptr, 0);
  EXPECT_EQ(reap_dead_procs(t.region, t.fd, -1), 1);
  EXPECT_EQ(tenant_usage(t.region, 0), 200u);
  ::kill(b, SIGKILL);
  ::waitpid(b, nullptr, 0);
  EXPECT_EQ(reap_dead_procs(t.region, t.fd, -1), 1);
  EXPECT_EQ(tenant_usage(t.region, 0), 0u);
  EXPECT_EQ(t.region->active_procs.load(), 0u);
  unmap(&t);
}

TEST_F(RegionTest, AProcessThatExitsGivesItsSlotBack) {
  std::string file = path("t");
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant(file.c_str(), true, 0644, "x", &t), RegionError::kOk);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t a = child_holding(file, 100, ready[1], true);
  char slot;
  ASSERT_EQ(::read(ready[0], &slot, 1), 1);
  ::waitpid(a, nullptr, 0);
  EXPECT_EQ(tenant_usage(t.region, 0), 0u);
  EXPECT_EQ(t.region->active_procs.load(), 0u);
  unmap(&t);
}

TEST_F(RegionTest, ConcurrentChargesNeverPassTheLimitAndFillItExactly) {
  std::string file = path("t");
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant(file.c_str(), true, 0644, "x", &t), RegionError::kOk);
  constexpr int kThreads = 8;
  constexpr uint64_t kLimit = 100'000;
  // Threads stand in for processes: each owns a slot (the locks are per process, so set the bits).
  for (int s = 0; s < kThreads; ++s) t.region->active_procs.fetch_or(uint64_t{1} << s);
  // What the charges that succeeded add up to (a charge is tried, and backed out, in the shared
  // counter itself, so a reader may glimpse a sum above the limit for an instant; what was granted
  // may never exceed it).
  std::atomic<uint64_t> granted{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int s = 0; s < kThreads; ++s) {
    threads.emplace_back([&, s] {
      for (;;) {
        if (try_charge(t.region, 3, s, 7, kLimit)) {
          if (granted.fetch_add(7) + 7 > kLimit) over = true;
          continue;
        }
        if (tenant_usage(t.region, 3) + 7 > kLimit) return;  // full: a true refusal (else a race: retry)
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_LE(t.region->peak_usage[3].load(), kLimit);
  EXPECT_EQ(granted.load(), kLimit / 7 * 7);
  EXPECT_EQ(tenant_usage(t.region, 3), granted.load());
  unmap(&t);
}

TEST_F(RegionTest, UnchargingNeverUnderflows) {
  std::string file = path("t");
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant(file.c_str(), true, 0644, "x", &t), RegionError::kOk);
  t.region->active_procs.store(1);
  ASSERT_TRUE(try_charge(t.region, 0, 0, 10, 100));
  uncharge(t.region, 0, 0, 25);
  EXPECT_EQ(tenant_usage(t.region, 0), 0u);
  unmap(&t);
}

TEST_F(RegionTest, TheAgentRegistersTenantsAndGpusThatJobsFindByUuid) {
  Mapped<LimitsRegion> l;
  ASSERT_EQ(create_limits(path("limits").c_str(), 0644, &l), RegionError::kOk);
  set_gpu(l.region->gpus, &l.region->gpu_count, 0, 0, "GPU-3f1c0a2b-0000-1111-2222-333344445555", 80ull << 30);
  set_gpu(l.region->gpus, &l.region->gpu_count, 1, 1, "MIG-aaaabbbb-cccc-dddd-eeee-ffff00001111", 10ull << 30);
  EXPECT_EQ(find_gpu(l.region->gpus, l.region->gpu_count.load(), "GPU-3F1C0A2B-0000-1111-2222-333344445555"), 0);
  EXPECT_EQ(find_gpu(l.region->gpus, l.region->gpu_count.load(), "MIG-aaaabbbb-cccc-dddd-eeee-ffff00001111"), 1);
  EXPECT_EQ(find_gpu(l.region->gpus, l.region->gpu_count.load(), "GPU-00000000-0000-0000-0000-000000000000"), -1);
  auto* entry = add_tenant(l.region, "train-7");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->limits.memory_limit[0].load(), 0u);  // nothing until the agent says
  entry->limits.memory_limit[0].store(20ull << 30);
  Mapped<LimitsRegion> job;
  ASSERT_EQ(open_limits(path("limits").c_str(), false, &job), RegionError::kOk);
  auto* seen = find_tenant(job.region, "train-7");
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->limits.memory_limit[0].load(), 20ull << 30);
  remove_tenant(l.region, "train-7");
  EXPECT_EQ(find_tenant(job.region, "train-7"), nullptr);
  unmap(&job);
  unmap(&l);
}

TEST_F(RegionTest, ExportsAreFoundByDigestAndTheOldestIsReusedWhenFull) {
  Mapped<TenantRegion> t;
  ASSERT_EQ(open_tenant(path("t").c_str(), true, 0644, "x", &t), RegionError::kOk);
  char handle[64] = "an ipc handle";
  uint64_t a, b;
  digest_bytes(handle, sizeof handle, &a, &b);
  add_export(t.region, a, b);
  EXPECT_TRUE(has_export(t.region, a, b));
  handle[10] ^= 1;
  uint64_t c, d;
  digest_bytes(handle, sizeof handle, &c, &d);
  EXPECT_FALSE(has_export(t.region, c, d));
  for (int i = 0; i < kMaxExports; ++i) add_export(t.region, 1000 + i, 1);
  EXPECT_FALSE(has_export(t.region, a, b));  // pushed out by the newer ones
  EXPECT_TRUE(has_export(t.region, 1000 + kMaxExports - 1, 1));
  unmap(&t);
}

}  // namespace
}  // namespace cnlab::vgpu
