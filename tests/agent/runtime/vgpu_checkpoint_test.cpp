// A process with libcnlab-vgpu.so attached, dumped and restored as on another node: the real library
// in the CUDA probe (tests/vgpu/probe.cpp) on the driver TEST DOUBLE (tests/fakes: no GPU here), the
// real shim and CRIU, and the agent's VgpuNode on both "nodes" (separate directories). What the job
// holds comes with its tenant region, its process slot stays its own across the restore, and the
// restoring node's limits apply. Needs root and a working CRIU, like the other checkpoint tests.
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "agent/runtime/runtime.h"
#include "agent/vgpu_node.h"
#include "test_support.h"

namespace cnlab::agent {
namespace {

using namespace std::chrono_literals;
using namespace testing;
namespace fs = std::filesystem;
constexpr const char* kUuid = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";  // the double's device
constexpr uint64_t kMiB = uint64_t{1} << 20;
const char* const kJob = "train-1";

class VgpuCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "CRIU dumps and restores other processes only as root; CI runs as root, so this runs there";
    ASSERT_TRUE(start_checkpoint_runtime(checkpoint_options(), &runtime_));
    std::ofstream(dir_.path() / "gpus.conf") << "device name=\"NVIDIA H100 80GB HBM3\" uuid=" << kUuid << " memory_mib=4096\n";
    GpuInfo gpu;
    gpu.uuid = kUuid;
    gpu.model = *model::find_model("h100");
    gpu.memory_mib = 4096;
    gpus_ = {gpu};
  }
  void TearDown() override {
    EXPECT_TRUE(no_children_left(5s)) << "a shim outlived its job";
    if (runtime_) {
      EXPECT_TRUE(runtime_->remove_cgroup_parent());
    }
  }

  std::unique_ptr<VgpuNode> node(const std::string& name) {
    auto opened = VgpuNode::open({dir_.path() / name / "vgpu", VGPU_LIBRARY});
    EXPECT_TRUE(opened) << opened.error().to_string();
    return opened ? std::move(*opened) : nullptr;
  }
  // The probe on `name`, registered there with a quota of `quota_mib`: it takes 64 MiB at a time
  // until refused, and again each time its work directory gets a file "go".
  ProcessSpec probe_job(VgpuNode& vgpu, const std::string& name, int64_t quota_mib) {
    const fs::path job = dir_.path() / name / "job";
    fs::create_directories(job / "work");
    model::NodeBinding binding{name, {{0, 25, quota_mib, -1}}};
    auto env = vgpu.add_job(kJob, binding, gpus_, std::nullopt, std::nullopt);
    EXPECT_TRUE(env) << env.error().to_string();
    ProcessSpec spec;
    spec.job_id = kJob;
    spec.argv = {PROBE_BINARY, "grow-when", "go", "64"};
    spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", std::string("LD_LIBRARY_PATH=") + FAKE_CUDA_DIR,
                "FAKE_CUDA_CONFIG=" + (dir_.path() / "gpus.conf").string(),
                "FAKE_CUDA_STATE_DIR=" + (dir_.path() / "state").string(), "CNLAB_VGPU_LOG=info"};
    if (env) spec.env.insert(spec.env.end(), env->begin(), env->end());
    spec.job_dir = job / "run";
    spec.working_dir = (job / "work").string();
    return spec;
  }
  // The probe's next "holding_mib N" and "grow_info R free F total T ..." lines.
  struct Grown {
    long long holding_mib = -1, total = -1;
  };
  static Grown next_growth(OutputReader& reader) {
    Grown out;
    for (const auto& line : read_until(reader, [](const std::string& l) { return l.rfind("grow_info", 0) == 0; })) {
      std::smatch m;
      static const std::regex holding(R"(holding_mib (\d+))"), info(R"(grow_info \d+ free \d+ total (\d+).*)");
      if (std::regex_match(line.text, m, holding)) out.holding_mib = std::stoll(m[1]);
      if (std::regex_match(line.text, m, info)) out.total = std::stoll(m[1]);
    }
    return out;
  }
  static uint64_t usage(VgpuNode& vgpu) {
    for (const auto& t : vgpu.sample(Time{})) {
      if (t.job == kJob && !t.gpus.empty()) return t.gpus[0].usage_bytes;
    }
    return ~uint64_t{0};
  }

  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<GpuInfo> gpus_;
};

TEST_F(VgpuCheckpointTest, AProcessWithTheLibraryAttachedIsRestoredElsewhereWithWhatItHoldsAndThatNodesQuota) {
  auto node_a = node("node-a");
  auto node_b = node("node-b");
  ASSERT_TRUE(node_a && node_b);
  auto source = runtime_->start(probe_job(*node_a, "node-a", 256));
  ASSERT_TRUE(source) << source.error().to_string();
  auto reader = OutputReader::open(source->output_path());
  ASSERT_TRUE(reader);
  const Grown first = next_growth(*reader);
  ASSERT_EQ(first.holding_mib, 256) << "its quota on node-a, 64 MiB at a time";
  EXPECT_EQ(usage(*node_a), 256 * kMiB);

  // Dumped as an agent dumps such a job: left stopped, its tenant region copied, then ended.
  const fs::path images = dir_.path() / "images", tenant = dir_.path() / "tenant";
  auto taken = source->checkpoint(images, JobHandle::AfterDump::kLeaveStopped);
  ASSERT_TRUE(taken) << taken.error().to_string();
  ASSERT_TRUE(node_a->save_tenant(kJob, tenant));
  ASSERT_TRUE(source->stop(0ms));
  node_a->remove_job(kJob);

  // "Another node": the work directory and the vGPU directory move, the images' paths with them,
  // and node-b gives the job 384 MiB.
  const fs::path from = dir_.path() / "node-a", to = dir_.path() / "node-b";
  ProcessSpec again = probe_job(*node_b, "node-b", 384);
  fs::copy(from / "job" / "work", to / "job" / "work", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  ASSERT_TRUE(rewrite_checkpoint_paths(images, from / "job", to / "job"));
  auto rewritten = rewrite_checkpoint_paths(images, from / "vgpu", to / "vgpu");
  ASSERT_TRUE(rewritten) << rewritten.error().to_string();
  EXPECT_GE(*rewritten, 2) << "its limits region and its tenant region";
  ASSERT_TRUE(node_b->restore_tenant(kJob, tenant));
  again.restore_from = images;
  auto restored = runtime_->start(again);
  node_b->restored(kJob);
  ASSERT_TRUE(restored) << restored.error().to_string();
  // Its slot came back with it: node-b's agent counts what it holds and does not reap it as a dead
  // process's (it would, were its lock not back).
  EXPECT_EQ(usage(*node_b), 256 * kMiB);
  EXPECT_EQ(usage(*node_b), 256 * kMiB);

  auto restored_reader = OutputReader::open(restored->output_path());
  ASSERT_TRUE(restored_reader);
  std::ofstream(to / "job" / "work" / "go") << "";
  const Grown after = next_growth(*restored_reader);
  // node-b's limit, with the 256 MiB it brought counted: 128 more, not 384.
  EXPECT_EQ(after.holding_mib, 384);
  EXPECT_EQ(after.total, static_cast<long long>(384 * kMiB)) << "cuMemGetInfo answers from node-b's region";
  EXPECT_EQ(usage(*node_b), 384 * kMiB);
  ASSERT_TRUE(restored->stop(2s));
  node_b->remove_job(kJob);
}

}  // namespace
}  // namespace cnlab::agent
