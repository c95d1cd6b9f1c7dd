// libcnlab-vgpu.so preloaded into real processes (the probe, probe.cpp) that reach the driver test
// double (tests/fakes, a fake libcuda.so.1 with a 4 GiB GPU) both ways real programs do: linked
// against libcuda.so.1, and through dlopen + cuGetProcAddress like the CUDA runtime. Standalone
// mode (limits from the environment) and agent mode (limits in a region the test writes the way
// the agent does) are both covered.
#include <gmock/gmock.h>

#include <thread>

#include "probe_process.h"
#include "vgpu/region.h"

namespace cnlab::vgpu::test {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr long long kMiB = 1 << 20;
constexpr const char* kUuid = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";

class InterceptionTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::ofstream(tmp_.path() + "/gpus.conf") << "device name=\"NVIDIA H100 80GB HBM3\" uuid=" << kUuid
                                              << " memory_mib=4096\n";
    std::ofstream(tmp_.path() + "/nvml.conf") << "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=" << kUuid
                                              << " memory_mib=4096 used_mib=0\n";
    std::filesystem::create_directories(vgpu_dir());
  }

  std::string vgpu_dir() const { return tmp_.path() + "/vgpu"; }
  std::string log_path() const { return tmp_.path() + "/vgpu.log"; }
  std::string log() const { return slurp(log_path()); }

  Env env(const Env& extra = {}) const {
    Env e = {{"LD_PRELOAD", VGPU_LIBRARY},
             {"LD_LIBRARY_PATH", std::string(FAKE_CUDA_DIR) + ":" + FAKE_NVML_DIR},
             {"FAKE_CUDA_CONFIG", tmp_.path() + "/gpus.conf"},
             {"FAKE_CUDA_STATE_DIR", tmp_.path() + "/state"},
             {"FAKE_NVML_CONFIG", tmp_.path() + "/nvml.conf"},
             {"CNLAB_VGPU_DIR", vgpu_dir()},
             {"CNLAB_VGPU_LOG", "info"},
             {"CNLAB_VGPU_LOG_FILE", log_path()}};
    for (const auto& [k, v] : extra) e[k] = v;
    return e;
  }
  // Standalone: a tenant with a memory limit.
  Env tenant(const std::string& id, const std::string& limit) const {
    return env({{"CNLAB_VGPU_TENANT", id}, {"CNLAB_VGPU_MEMORY_LIMIT", limit}});
  }

  std::string binary() const { return GetParam(); }
  std::unique_ptr<Probe> start(const std::vector<std::string>& args, const Env& e) {
    return std::make_unique<Probe>(binary(), args, e);
  }
  // Runs a scenario to its end and returns its output.
  std::string run(const std::vector<std::string>& args, const Env& e) {
    Probe p(binary(), args, e);
    int code = p.finish();
    EXPECT_EQ(code, 0) << p.output() << log();
    return p.output();
  }
  static std::string line_of(const std::string& output, const std::string& key) {
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(key, 0) == 0) return line;
    }
    return "";
  }

  TempDir tmp_;
};

TEST_P(InterceptionTest, TheQuotaIsTheMemoryCudaReports) {
  std::string out = run({"info"}, tenant("t1", "1Gi"));
  std::string info = line_of(out, "start_info");
  EXPECT_EQ(field(info, "start_info"), 0) << out;
  EXPECT_EQ(field(info, "total"), 1024 * kMiB);
  EXPECT_EQ(field(info, "free"), 1024 * kMiB);
  EXPECT_EQ(field(info, "device_total"), 1024 * kMiB);
}

TEST_P(InterceptionTest, WithoutALimitTheDevicesOwnFiguresPassThrough) {
  std::string out = run({"info"}, env({{"CNLAB_VGPU_TENANT", "free-for-all"}}));
  EXPECT_EQ(field(line_of(out, "start_info"), "total"), 4096 * kMiB) << out;
}

TEST_P(InterceptionTest, AnAllocationBeyondTheQuotaFailsAndNothingLeaks) {
  std::string out = run({"alloc", "600", "500", "400"}, tenant("t1", "1Gi"));
  std::istringstream in(out);
  std::vector<long long> results;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("alloc ", 0) == 0) results.push_back(field(line, "alloc"));
  }
  EXPECT_THAT(results, ::testing::ElementsAre(0, 2, 0)) << out;  // 2: CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(field(line_of(out, "held_info"), "free"), 24 * kMiB);
  EXPECT_EQ(field(line_of(out, "freed_info"), "free"), 1024 * kMiB);
  EXPECT_THAT(log(), HasSubstr("refused cuMemAlloc of 524288000 bytes"));
  EXPECT_THAT(log(), HasSubstr("tenant \"t1\" holds 629145600 of its 1073741824-byte limit"));
}

TEST_P(InterceptionTest, EveryAllocationPathIsCountedAndFreedAgain) {
  std::string out = run({"paths", "1024"}, tenant("t1", "1Gi"));
  for (const char* path : {"cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged", "cuArrayCreate", "cuArray3DCreate",
                           "cuMipmappedArrayCreate", "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate"}) {
    std::string line = line_of(out, std::string("path ") + path + " ");
    EXPECT_EQ(field(line, "within"), 0) << path << "\n" << out << log();
    EXPECT_EQ(field(line, "beyond"), 2) << path << "\n" << out << log();
  }
  EXPECT_EQ(field(line_of(out, "after_info"), "free"), 1024 * kMiB) << out;
}

TEST_P(InterceptionTest, VmmMemoryReleasedWhileMappedStaysChargedUntilUnmapped) {
  std::string out = run({"vmm-map-release", "64"}, tenant("t1", "1Gi"));
  EXPECT_EQ(field(line_of(out, "create"), "create"), 0) << out;
  EXPECT_EQ(field(line_of(out, "mapped_info"), "free"), (1024 - 64) * kMiB) << out;
  EXPECT_EQ(field(line_of(out, "unmapped_info"), "free"), 1024 * kMiB) << out;
}

TEST_P(InterceptionTest, TwoProcessesOfOneTenantShareOneQuota) {
  auto holder = start({"hold", "600"}, tenant("team", "1Gi"));
  ASSERT_TRUE(holder->wait_for("held_info")) << holder->output() << log();
  std::string out = run({"alloc", "600", "400"}, tenant("team", "1Gi"));
  EXPECT_EQ(field(line_of(out, "alloc"), "alloc"), 2) << out;
  EXPECT_EQ(field(line_of(out, "held_info"), "free"), 24 * kMiB) << out;  // 1024 - 600 - 400
  EXPECT_EQ(holder->finish(), 0);
  // The holder is gone: the whole quota is free again.
  EXPECT_EQ(field(line_of(run({"info"}, tenant("team", "1Gi")), "start_info"), "free"), 1024 * kMiB);
}

TEST_P(InterceptionTest, TwoTenantsOnOneGpuEachHaveTheirOwnQuota) {
  auto a = start({"hold", "900"}, tenant("alpha", "1Gi"));
  ASSERT_TRUE(a->wait_for("held_info"));
  std::string out = run({"alloc", "900"}, tenant("beta", "1Gi"));
  EXPECT_EQ(field(line_of(out, "alloc"), "alloc"), 0) << out << log();
  EXPECT_EQ(a->finish(), 0);
}

TEST_P(InterceptionTest, IpcHandlesOpenWithinATenantAndAreRefusedAcrossTenants) {
  auto exporter = start({"ipc-export"}, tenant("alpha", "1Gi"));
  auto mem = exporter->wait_for("mem_handle");
  auto event = exporter->wait_for("event_handle");
  ASSERT_TRUE(mem && event) << exporter->output() << log();
  std::string mem_hex = mem->substr(11), event_hex = event->substr(13);

  std::string same = run({"ipc-open", mem_hex, event_hex}, tenant("alpha", "1Gi"));
  EXPECT_EQ(field(line_of(same, "open_mem"), "open_mem"), 0) << same << log();
  EXPECT_THAT(same, HasSubstr("read shared by the exporter"));
  EXPECT_EQ(field(line_of(same, "open_event"), "open_event"), 0) << same;

  std::string other = run({"ipc-open", mem_hex, event_hex}, tenant("beta", "1Gi"));
  EXPECT_EQ(field(line_of(other, "open_mem"), "open_mem"), 800) << other;  // CUDA_ERROR_NOT_PERMITTED
  EXPECT_EQ(field(line_of(other, "open_event"), "open_event"), 800) << other;
  EXPECT_THAT(other, Not(HasSubstr("read ")));
  EXPECT_THAT(log(), HasSubstr("refused cuIpcOpenMemHandle: the handle was exported by tenant \"alpha\", not by tenant \"beta\""));
  EXPECT_EQ(exporter->finish(), 0);
}

TEST_P(InterceptionTest, VmmShareableHandlesImportWithinATenantOnly) {
  auto exporter = start({"vmm-export", "64"}, tenant("alpha", "1Gi"));
  auto path = exporter->wait_for("fd_path");
  ASSERT_TRUE(path) << exporter->output() << log();
  std::string fd_path = path->substr(8);
  std::string same = run({"vmm-import", fd_path, "64"}, tenant("alpha", "1Gi"));
  EXPECT_EQ(field(line_of(same, "import"), "import"), 0) << same << log();
  EXPECT_EQ(field(line_of(same, "map"), "map"), 0) << same;
  // Charged once, to the exporter (the same tenant): the importer's view still shows 64 MiB used.
  EXPECT_EQ(field(line_of(same, "imported_info"), "free"), (1024 - 64) * kMiB) << same;
  std::string other = run({"vmm-import", fd_path, "64"}, tenant("beta", "1Gi"));
  EXPECT_EQ(field(line_of(other, "import"), "import"), 800) << other;
  EXPECT_EQ(exporter->finish(), 0);
}

TEST_P(InterceptionTest, AProcessKilledMidAllocationLeavesNothingCharged) {
  // The driver takes 3 s over this allocation; the process is killed while it waits (charged, not
  // yet returned).
  Env slow = tenant("team", "1Gi");
  slow["FAKE_CUDA_ALLOC_DELAY_US"] = "3000000";
  auto victim = start({"alloc", "900"}, slow);
  Mapped<TenantRegion> region;
  std::string file = vgpu_dir() + "/tenants/team";
  auto deadline = std::chrono::steady_clock::now() + 20s;
  bool charged = false;
  while (!charged && std::chrono::steady_clock::now() < deadline) {
    if (!region && open_tenant_readonly(file.c_str(), &region) != RegionError::kOk) {
      std::this_thread::sleep_for(10ms);
      continue;
    }
    charged = tenant_usage(region.region, 0) == 900 * kMiB;
    if (!charged) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(charged) << log();
  victim->kill(SIGKILL);
  EXPECT_EQ(victim->finish(), -SIGKILL);
  // Another process of the tenant gets the whole quota: the dead one's charge is reaped.
  std::string out = run({"alloc", "1000"}, tenant("team", "1Gi"));
  EXPECT_EQ(field(line_of(out, "alloc"), "alloc"), 0) << out << log();
  unmap(&region);
}

TEST_P(InterceptionTest, ManyThreadsAllocatingAtOnceEndWithNothingCharged) {
  std::string out = run({"threads", "8", "300"}, tenant("t1", "64Mi"));
  EXPECT_EQ(field(line_of(out, "end_info"), "free"), 64 * kMiB) << out;
}

TEST_P(InterceptionTest, AForkedChildIsAProcessOfTheSameTenantWithItsOwnSlot) {
  std::string out = run({"fork", "300"}, tenant("team", "512Mi"));
  EXPECT_EQ(field(line_of(out, "parent_alloc"), "parent_alloc"), 0) << out;
  EXPECT_EQ(field(line_of(out, "child_alloc"), "child_alloc"), 2) << out << log();  // 300 + 300 > 512
  EXPECT_EQ(field(line_of(out, "child_info"), "free"), 212 * kMiB) << out;
  EXPECT_EQ(field(line_of(out, "parent_info"), "free"), 212 * kMiB) << out;
}

TEST_P(InterceptionTest, NvmlAndCudaReportTheSameQuotaAndUsage) {
  std::string out = run({"nvml", "300"}, tenant("t1", "1Gi"));
  std::string v1 = line_of(out, "nvml_v1"), v2 = line_of(out, "nvml_v2"), cuda = line_of(out, "cuda_info");
  ASSERT_EQ(field(v1, "nvml_v1"), 0) << out << log();
  ASSERT_EQ(field(v2, "nvml_v2"), 0) << out;
  for (const std::string& line : {v1, v2, cuda}) {
    EXPECT_EQ(field(line, "total"), 1024 * kMiB) << line;
    EXPECT_EQ(field(line, "free"), 724 * kMiB) << line;
  }
  EXPECT_EQ(field(v1, "used"), 300 * kMiB);
  EXPECT_EQ(field(v2, "used"), 300 * kMiB);
}

TEST_P(InterceptionTest, TheRuntimesPrivateExportTablesPassThroughUntouched) {
  std::string out = run({"export-table"}, tenant("t1", "1Gi"));
  EXPECT_EQ(field(line_of(out, "export_table"), "export_table"), 0) << out;
  EXPECT_THAT(out, HasSubstr("magic 636e6c6162746231"));
}

TEST_P(InterceptionTest, ABadLimitRefusesCudaAndSaysWhy) {
  Probe p(binary(), {"info"}, tenant("t1", "lots"));
  EXPECT_EQ(p.finish(), 2);
  EXPECT_THAT(p.output(), HasSubstr("init 3"));  // CUDA_ERROR_NOT_INITIALIZED
  EXPECT_THAT(log(), HasSubstr("CNLAB_VGPU_MEMORY_LIMIT=\"lots\""));
}

// The compute share, standalone: each tenant's own controller paces its launches from the GPU
// time NVML reports per process (here, the driver test double's timeline: one kernel at a time,
// first come first served, sampled as a real driver samples it: fake_nvml.cpp). What each got is
// the double's own count of its kernels' time.
class ComputeShareTest : public InterceptionTest {
 protected:
  Env share(const std::string& id, int percent, bool hard = false) const {
    Env e = env({{"CNLAB_VGPU_TENANT", id}, {"CNLAB_VGPU_COMPUTE_SHARE", std::to_string(percent)}});
    if (hard) e["CNLAB_VGPU_HARD_SHARE"] = "1";
    return e;
  }
  // The busy ns a launch probe reported at its mark nearest `ms`.
  static std::pair<long long, long long> busy_at(const Probe& p, long long ms) {
    long long best = -1, busy = 0, at = 0;
    for (const auto& line : p.lines()) {
      if (line.rfind("busy ", 0) != 0) continue;
      long long t = field(line, "at_ms");
      if (best < 0 || std::llabs(t - ms) < best) best = std::llabs(t - ms), busy = field(line, "busy"), at = t;
    }
    return {busy, at};
  }
};

TEST_P(ComputeShareTest, TenantsAt30And70OfABusyGpuGetTheirShares) {
  auto a = start({"launch", "spin_200us", "7", "8"}, share("thirty", 30));
  auto b = start({"launch", "spin_200us", "7", "8"}, share("seventy", 70));
  ASSERT_TRUE(a->wait_for("launched", 30s)) << a->output() << log();
  ASSERT_TRUE(b->wait_for("launched", 30s)) << b->output();
  EXPECT_EQ(a->finish(), 0);  // its controller thread stopped cleanly at exit
  EXPECT_EQ(b->finish(), 0);
  // After 3 s to settle, over the next 3.5 s.
  auto [a0, ta0] = busy_at(*a, 3000);
  auto [a1, ta1] = busy_at(*a, 6500);
  auto [b0, tb0] = busy_at(*b, 3000);
  auto [b1, tb1] = busy_at(*b, 6500);
  double got_a = static_cast<double>(a1 - a0), got_b = static_cast<double>(b1 - b0);
  ASSERT_GT(got_a + got_b, 0) << a->output() << b->output();
  double share_a = 100 * got_a / (got_a + got_b);
  EXPECT_NEAR(share_a, 30, 5) << "a: " << a->output() << "\nb: " << b->output() << log();
  // The GPU stayed busy: the two together used (nearly) all of it.
  double wall = 1e6 * static_cast<double>(std::min(ta1, tb1) - std::max(ta0, tb0));
  EXPECT_GT((got_a + got_b) / wall, 0.85);
}

TEST_P(ComputeShareTest, ALoneTenantGetsTheWholeGpuUnlessItsShareIsHard) {
  // Batches of 32 kernels (6.4 ms of GPU work per synchronisation), so that the probe's own CPU
  // time, on a loaded machine, leaves few gaps on the GPU.
  auto soft = start({"launch", "spin_200us", "4", "32"}, share("alone", 30));
  ASSERT_TRUE(soft->wait_for("launched", 30s)) << soft->output() << log();
  EXPECT_EQ(soft->finish(), 0);
  auto [s0, ts0] = busy_at(*soft, 1500);
  auto [s1, ts1] = busy_at(*soft, 3500);
  EXPECT_GT(static_cast<double>(s1 - s0) / (1e6 * static_cast<double>(ts1 - ts0)), 0.85) << soft->output();

  // The controller corrects once a second, at most halving a pace each time: from the whole GPU
  // to 30% takes two corrections, so the share is measured from 4 s on.
  auto hard = start({"launch", "spin_200us", "7", "8"}, share("capped", 30, true));
  ASSERT_TRUE(hard->wait_for("launched", 30s)) << hard->output() << log();
  EXPECT_EQ(hard->finish(), 0);
  auto [h0, th0] = busy_at(*hard, 4000);
  auto [h1, th1] = busy_at(*hard, 6500);
  EXPECT_NEAR(100 * static_cast<double>(h1 - h0) / (1e6 * static_cast<double>(th1 - th0)), 30, 5) << hard->output();
}

#if defined(PROBE_TSAN_BINARY)
// The library's code built into the probe under ThreadSanitizer (reached by link, not preload):
// eight threads allocating and freeing at once, against one tenant's limit, race on nothing.
TEST(VgpuThreadSanitizer, ManyThreadsAllocatingAndFreeingAtOnceRaceOnNothing) {
  TempDir tmp;
  std::ofstream(tmp.path() + "/gpus.conf") << "device uuid=" << kUuid << " memory_mib=4096\n";
  Env e = {{"LD_LIBRARY_PATH", FAKE_CUDA_DIR},
           {"FAKE_CUDA_CONFIG", tmp.path() + "/gpus.conf"},
           {"FAKE_CUDA_STATE_DIR", tmp.path() + "/state"},
           {"CNLAB_VGPU_DIR", tmp.path() + "/vgpu"},
           {"CNLAB_VGPU_TENANT", "t1"},
           {"CNLAB_VGPU_MEMORY_LIMIT", "64Mi"},
           {"TSAN_OPTIONS", "halt_on_error=1 exitcode=66 report_signal_unsafe=0"}};
  Probe p(PROBE_TSAN_BINARY, {"threads", "8", "200"}, e);
  auto end = p.wait_for("end_info", 120s);
  int code = p.finish(120s);
  EXPECT_EQ(code, 0) << "ThreadSanitizer (exit 66) or a failure:\n" << p.output();
  ASSERT_TRUE(end) << p.output();
  EXPECT_EQ(field(*end, "free"), 64 * kMiB);
}
#endif

// Agent mode: the test plays the agent, writing the node's limits region and the tenant region.
class AgentModeTest : public InterceptionTest {
 protected:
  void SetUp() override {
    InterceptionTest::SetUp();
    std::filesystem::create_directories(vgpu_dir() + "/tenants");
    ASSERT_EQ(create_limits((vgpu_dir() + "/limits").c_str(), 0644, &limits_), RegionError::kOk);
    set_gpu(limits_.region->gpus, &limits_.region->gpu_count, 0, 0, kUuid, 4096ull * kMiB);
  }
  void TearDown() override { unmap(&limits_); }

  LimitsRegion::Tenant* add(const std::string& id, uint64_t limit) {
    auto* t = add_tenant(limits_.region, id.c_str());
    t->limits.memory_limit[0].store(limit);
    t->limits.memory_quota[0].store(limit);
    Mapped<TenantRegion> region;
    EXPECT_EQ(open_tenant((vgpu_dir() + "/tenants/" + id).c_str(), true, 0644, id.c_str(), &region), RegionError::kOk);
    set_gpu(region.region->gpus, &region.region->gpu_count, 0, 0, kUuid, 4096ull * kMiB);
    unmap(&region);
    return t;
  }
  Env agent_env(const std::string& id) const {
    return env({{"CNLAB_VGPU_REGION", vgpu_dir() + "/limits"}, {"CNLAB_VGPU_TENANT", id}});
  }

  Mapped<LimitsRegion> limits_;
};

TEST_P(AgentModeTest, TheAgentsLimitAppliesAndCanBeResizedWhileTheJobRuns) {
  auto* t = add("train-1", 256 * kMiB);
  auto job = start({"grow", "64"}, agent_env("train-1"));
  auto first = job->wait_for("holding_mib");
  ASSERT_TRUE(first) << job->output() << log();
  EXPECT_EQ(field(*first, "holding_mib"), 256);
  t->limits.memory_limit[0].store(512 * kMiB);  // the agent grants a burst
  job->send_line("again");
  auto second = job->wait_for("holding_mib");
  ASSERT_TRUE(second);
  EXPECT_EQ(field(*second, "holding_mib"), 512);
  EXPECT_EQ(field(*job->wait_for("grow_info"), "total"), 512 * kMiB);
  t->limits.memory_limit[0].store(128 * kMiB);  // shrunk below what it holds: nothing more for it
  job->send_line("again");
  auto third = job->wait_for("holding_mib");
  ASSERT_TRUE(third);
  EXPECT_EQ(field(*third, "holding_mib"), 512);
  auto view = job->wait_for("grow_info");
  EXPECT_EQ(field(*view, "free"), 0);
  EXPECT_EQ(field(*view, "total"), 128 * kMiB);
  EXPECT_EQ(job->finish(), 0);
}

TEST_P(AgentModeTest, ATenantTheAgentDidNotRegisterGetsNoCuda) {
  Probe p(binary(), {"info"}, agent_env("stranger"));
  EXPECT_EQ(p.finish(), 2);
  EXPECT_THAT(log(), HasSubstr("CNLAB_VGPU_TENANT=\"stranger\": the agent has not registered this tenant"));
}

TEST_P(AgentModeTest, AGpuTheAgentDidNotListIsRefused) {
  add("train-1", 256 * kMiB);
  limits_.region->gpus[0].uuid[10] ^= 1;  // the region's table no longer names this device
  std::string out = run({"alloc", "1"}, agent_env("train-1"));
  EXPECT_EQ(field(line_of(out, "alloc"), "alloc"), 2) << out;
  EXPECT_THAT(log(), HasSubstr("is not one of the GPUs the agent gave this tenant"));
}

INSTANTIATE_TEST_SUITE_P(BothWaysToTheDriver, InterceptionTest, ::testing::Values(PROBE_LINKED_BINARY, PROBE_DLOPEN_BINARY),
                         [](const auto& info) { return std::string(info.index == 0 ? "Linked" : "Dlopen"); });
INSTANTIATE_TEST_SUITE_P(Linked, ComputeShareTest, ::testing::Values(PROBE_LINKED_BINARY));
INSTANTIATE_TEST_SUITE_P(BothWaysToTheDriver, AgentModeTest, ::testing::Values(PROBE_LINKED_BINARY, PROBE_DLOPEN_BINARY),
                         [](const auto& info) { return std::string(info.index == 0 ? "Linked" : "Dlopen"); });

}  // namespace
}  // namespace cnlab::vgpu::test
