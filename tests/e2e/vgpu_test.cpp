// 1% blocks end to end: a real server and a real agent whose GPU is the NVML test double, jobs
// running the CUDA probe (tests/vgpu/probe.cpp) against the libcuda.so.1 test double, and the
// agent loading libcnlab-vgpu.so into them. What the scheduler decided (the binding's VRAM) is the
// quota the job's CUDA sees; the agent grants bursts, takes them back and asks for a move when the
// GPU runs short; activity reaches the server, which reclaims slices left idle.
#include <gmock/gmock.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "agent_process.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kUuid = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";

class VgpuTest : public ClusterTest {
 protected:
  void SetUp() override {
    ::chmod(nodes_.path().c_str(), 0711);
    ::chmod(gpu_.path().c_str(), 0755);
    // One 4 GiB H100, as NVML (the agent) and CUDA (the jobs) see it.
    std::ofstream(gpu_.path() + "/nvml.conf") << "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=" << kUuid
                                              << " memory_mib=4096 used_mib=0\n";
    std::ofstream(gpu_.path() + "/cuda.conf") << "device uuid=" << kUuid << " memory_mib=4096\n";
    state_ = gpu_.path() + "/state";
    fs::create_directories(state_);
    ::chmod(state_.c_str(), 0777);  // jobs run as nobody
    start_server({"--idle-reclaim", "dev=4s"});
    ::setenv("FAKE_NVML_CONFIG", (gpu_.path() + "/nvml.conf").c_str(), 1);
    ::setenv("FAKE_NVML_CUDA_LIBRARY", FAKE_CUDA_LIBRARY, 1);
    ::setenv("FAKE_CUDA_STATE_DIR", state_.c_str(), 1);
    std::string join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}})["token"];
    AgentProcess::Options options{"gpu-1", "", ::geteuid() == 0 ? "nobody" : "",
                                  {"--nvml-library", FAKE_NVML_LIBRARY, "--no-namespaces"}};
    agent_ = std::make_unique<AgentProcess>(*server_, join, nodes_.path() + "/agent-gpu-1", options);
    ASSERT_TRUE(eventually([&] {
      auto r = admin_->request("GET", "/v1/nodes/gpu-1");
      return r && r->status == 200 && Json::parse(r->body)["status"]["phase"] == "Ready";
    })) << agent_->log();
  }
  void TearDown() override {
    for (const char* v : {"FAKE_NVML_CONFIG", "FAKE_NVML_CUDA_LIBRARY", "FAKE_CUDA_STATE_DIR"}) ::unsetenv(v);
  }

  // A job running the probe's `args` on `gpu`.
  std::string submit(const std::vector<std::string>& args, const std::string& gpu, const std::string& cls = "production",
                     const Json& extra_env = Json::object()) {
    std::vector<std::string> command = {PROBE_BINARY};
    command.insert(command.end(), args.begin(), args.end());
    Json body = job_body("default", gpu, command);
    body["spec"]["memory_mib"] = 256;
    body["spec"]["priority_class"] = cls;
    body["spec"]["env"] = {{"LD_LIBRARY_PATH", fs::path(FAKE_CUDA_LIBRARY).parent_path().string()},
                           {"FAKE_CUDA_CONFIG", gpu_.path() + "/cuda.conf"},
                           {"FAKE_CUDA_STATE_DIR", state_},
                           {"CNLAB_VGPU_LOG", "info"}};
    for (const auto& [k, v] : extra_env.items()) body["spec"]["env"][k] = v;
    return call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }
  // The job's stdout (the probe's facts; the library logs to stderr, interleaved in no set order).
  std::string output(const std::string& id) {
    auto r = admin_->request("GET", "/v1/jobs/" + id + "/logs");
    std::string text;
    if (!r || r->status != 200) return text;
    std::stringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      Json parsed = Json::parse(line);
      if (parsed.value("stream", "stdout") == "stdout") text += parsed["text"].get<std::string>() + "\n";
    }
    return text;
  }
  // The most a grow-for probe said it held, MiB.
  static long most_held(const std::string& out) {
    long most = 0;
    std::stringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("holding_mib ", 0) == 0) most = std::max(most, std::stol(line.substr(12)));
    }
    return most;
  }
  static bool has_event(const Json& job, const std::string& type, const std::string& text = "") {
    for (const Json& e : job["status"]["events"]) {
      if (e["type"] == type && e.value("reason", "").find(text) != std::string::npos) return true;
    }
    return false;
  }

  TempDir nodes_, gpu_;
  std::string state_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(VgpuTest, AJobsCudaSeesTheVramItsBlocksWereGivenAndNoMore) {
  // 25 blocks of a 4 GiB GPU: a 1 GiB quota.
  std::string id = submit({"alloc", "600", "600"}, "h100-25");
  Json job = wait_for_end(id);
  ASSERT_EQ(job["status"]["phase"], "Succeeded") << job.dump() << output(id) << agent_->log();
  EXPECT_EQ(job["status"]["placement"][0]["gpus"][0]["vram_mib"], 1024);
  std::string out = output(id);
  EXPECT_THAT(out, HasSubstr("alloc 0\nalloc 2\n"));  // the second 600 MiB is past the quota
  EXPECT_THAT(out, HasSubstr("held_info 0 free 444596224 total 1073741824"));  // 1024 - 600 MiB
  EXPECT_THAT(agent_->log(), HasSubstr("vgpu tenant registered job=\"" + id + "\""));
}

TEST_F(VgpuTest, AJobCannotNameAnotherTenantOrItsOwnLimitsOrPreloadPastTheLibrary) {
  std::string id = submit({"alloc", "600", "600"}, "h100-25", "production",
                          {{"CNLAB_VGPU_TENANT", "someone-else"}, {"CNLAB_VGPU_MEMORY_LIMIT", "64Gi"},
                           {"LD_PRELOAD", "/nonexistent/libmine.so"}});
  Json job = wait_for_end(id);
  ASSERT_EQ(job["status"]["phase"], "Succeeded") << job.dump() << output(id);
  EXPECT_THAT(output(id), HasSubstr("alloc 0\nalloc 2\n"));  // still the 1 GiB quota of its own blocks
}

TEST_F(VgpuTest, TheGpuUseOfAJobReachesTheServerAndTheAgentsMetrics) {
  std::string id = submit({"launch", "noop_0us", "3"}, "h100-25");
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].contains("gpu_active_at"); }, 20s))
      << get_job(*admin_, id).dump() << agent_->log();
  auto metrics = net::Client::connect({agent_->metrics_url(), "", ""});
  ASSERT_TRUE(metrics);
  auto scraped = (*metrics)->request("GET", "/metrics");
  ASSERT_TRUE(scraped);
  EXPECT_THAT(scraped->body, HasSubstr("cnlab_agent_vgpu_memory_quota_bytes{job=\"" + id + "\",uuid=\"" + kUuid +
                                       "\"} 1073741824"));
  EXPECT_THAT(scraped->body, HasSubstr("cnlab_agent_vgpu_launches_total{job=\"" + id + "\"}"));
  EXPECT_EQ(wait_for_end(id)["status"]["phase"], "Succeeded");
}

// Two jobs of 30 and 70 blocks on one busy GPU: the agent paces their launches from what NVML says
// each process used, and each gets its blocks' share. The NVML double samples as the real driver
// was seen to (one process per 100 ms tick, tests/fakes/fake_nvml.cpp); on an H200 the agent's
// controller, reading NVML every 100 ms, saw one job at a time and never paced them.
TEST_F(VgpuTest, TwoJobsOnABusyGpuEachGetTheirBlocksShareOfIt) {
  std::string low = submit({"launch", "spin_200us", "10", "8"}, "h100-30");
  std::string high = submit({"launch", "spin_200us", "10", "8"}, "h100-70");
  for (const std::string& id : {low, high}) {
    Json job = wait_for_end(id, 60s);
    ASSERT_EQ(job["status"]["phase"], "Succeeded") << job.dump() << output(id) << agent_->log();
  }
  // The double's own count of each job's GPU time (busy ns) at the probe's marks, from 5 s on.
  auto busy_between = [&](const std::string& id, long from_ms, long to_ms) {
    long long first = -1, last = -1;
    std::stringstream in(output(id));
    for (std::string line; std::getline(in, line);) {
      long long busy = 0, at = 0;
      if (std::sscanf(line.c_str(), "busy %lld at_ms %lld", &busy, &at) != 2 || at < from_ms || at > to_ms) continue;
      if (first < 0) first = busy;
      last = busy;
    }
    return first < 0 ? 0.0 : static_cast<double>(last - first);
  };
  const double got_low = busy_between(low, 5000, 9500), got_high = busy_between(high, 5000, 9500);
  ASSERT_GT(got_low + got_high, 0) << output(low) << output(high);
  EXPECT_NEAR(100 * got_low / (got_low + got_high), 30, 5) << output(low) << output(high) << agent_->log();
}

TEST_F(VgpuTest, ASliceLeftIdlePastItsClassLimitIsReclaimedAndAudited) {
  // A dev job that holds its slice and never touches the GPU (the server allows dev 4 s here).
  std::string id = submit({"hold", "64", "60"}, "h100-25", "dev");
  Json job = wait_for_end(id, 40s);
  EXPECT_EQ(job["status"]["phase"], "Cancelled") << job.dump() << output(id) << agent_->log();
  EXPECT_TRUE(has_event(job, "IdleReclaimed", "dev jobs may idle 4s")) << job.dump();
  Json audit = call(*admin_, "GET", "/v1/audit?limit=1000", 200);
  EXPECT_THAT(audit.dump(), HasSubstr("jobs.reclaim"));
  // A production job is never reclaimed for idling.
  std::string kept = submit({"hold", "64", "60"}, "h100-25", "production");
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, kept)["status"]["phase"] == "Running"; }, 20s))
      << get_job(*admin_, kept).dump() << agent_->log();
  std::this_thread::sleep_for(6s);
  EXPECT_EQ(get_job(*admin_, kept)["status"]["phase"], "Running");
  call(*admin_, "POST", "/v1/jobs/" + kept + "/cancel", 200);
}

TEST_F(VgpuTest, AJobNearItsQuotaIsGrantedABurstAndAMoveFreesMemoryAnotherJobIsOwed) {
  // 50 blocks: a 2 GiB quota. Alone on the GPU it is let past it, burst by burst.
  std::string bursting = submit({"grow-for", "60", "128"}, "h100-50", "opportunistic");
  ASSERT_TRUE(eventually([&] { return most_held(output(bursting)) > 2048; }, 30s)) << output(bursting) << agent_->log();
  Json grown = get_job(*admin_, bursting);
  EXPECT_TRUE(has_event(grown, "MemoryBurst", "MemoryBurstGranted")) << grown.dump();

  // Another job is placed on the GPU with a 2 GiB quota of its own, which the burst now holds: the
  // agent takes the headroom back and asks for the bursting job to be moved.
  std::string owed = submit({"grow-for", "8", "256"}, "h100-50", "production");
  ASSERT_TRUE(eventually([&] { return has_event(get_job(*admin_, bursting), "MoveRequested"); }, 30s))
      << get_job(*admin_, bursting).dump() << agent_->log();
  Json moved = get_job(*admin_, bursting);
  EXPECT_TRUE(has_event(moved, "Preempted", "moved off node gpu-1 (GPU short of memory)")) << moved.dump();
  // With the memory back, the owed job gets all of its quota.
  ASSERT_TRUE(eventually([&] { return most_held(output(owed)) == 2048; }, 30s)) << output(owed) << agent_->log();
  call(*admin_, "POST", "/v1/jobs/" + bursting + "/cancel", 200);
}

}  // namespace
}  // namespace cnlab::server::test_support
