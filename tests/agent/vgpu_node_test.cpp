// The agent's side of the vGPU regions (VgpuNode): each job gets a limits region of its own, which
// names only the job and only its GPUs, in the order of its binding; the control loops find a GPU's
// tenants by its UUID whatever index each job knows it by. Real files in a temporary directory; a
// tenant's memory use is charged by a forked process, as a job's process would (the agent reaps a
// slot whose record lock no other process holds).
#include "agent/vgpu_node.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
constexpr uint64_t kMiB = uint64_t{1} << 20;

class VgpuNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/cnlab-vgpu-node-XXXXXX";
    root_ = ::mkdtemp(name);
    std::ofstream(root_ / "libcnlab-vgpu.so") << "";
    for (int i = 0; i < 2; ++i) {
      GpuInfo gpu;
      gpu.index = i;
      gpu.uuid = "GPU-n-" + std::to_string(i);
      gpu.model = *model::find_model("h100");
      gpu.memory_mib = 80 * 1024;
      gpus_.push_back(gpu);
    }
    node_ = open();
  }
  void TearDown() override {
    for (pid_t child : children_) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    node_.reset();
    fs::remove_all(root_);
  }
  std::unique_ptr<VgpuNode> open() {
    auto node = VgpuNode::open({root_ / "vgpu", root_ / "libcnlab-vgpu.so"});
    EXPECT_TRUE(node) << node.error().to_string();
    return node ? std::move(*node) : nullptr;
  }
  // Registers `job` and returns its limits region's path (CNLAB_VGPU_REGION).
  std::string add(const std::string& job, std::vector<model::GpuBinding> gpus) {
    model::NodeBinding binding{"n", std::move(gpus)};
    auto env = node_->add_job(job, binding, gpus_, std::nullopt, std::nullopt);
    EXPECT_TRUE(env) << env.error().to_string();
    for (const std::string& v : env ? *env : std::vector<std::string>{}) {
      if (v.rfind("CNLAB_VGPU_REGION=", 0) == 0) return v.substr(std::string("CNLAB_VGPU_REGION=").size());
    }
    return "";
  }
  // A process of `job` holding `mib` on the GPU its regions number `gpu`, until the test ends.
  void hold(const std::string& job, int gpu, uint64_t mib) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      vgpu::Mapped<vgpu::TenantRegion> region;
      const std::string path = (root_ / "vgpu" / "tenants" / job).string();
      if (vgpu::open_tenant(path.c_str(), false, 0, job.c_str(), &region) != vgpu::RegionError::kOk) ::_exit(1);
      int slot = vgpu::claim_proc_slot(region.region, region.fd, ::getpid(), 0);
      if (slot < 0 || !vgpu::try_charge(region.region, gpu, slot, mib * kMiB, vgpu::kUnlimited)) ::_exit(1);
      char byte = 1;
      (void)!::write(ready[1], &byte, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    children_.push_back(child);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the child could not charge " << job;
    ::close(ready[0]);
  }
  const VgpuTenantSample* sample_of(const std::vector<VgpuTenantSample>& samples, const std::string& job) {
    for (const auto& s : samples) {
      if (s.job == job) return &s;
    }
    return nullptr;
  }

  fs::path root_;
  std::vector<GpuInfo> gpus_;
  std::unique_ptr<VgpuNode> node_;
  std::vector<pid_t> children_;
};

TEST_F(VgpuNodeTest, EachJobsLimitsRegionNamesOnlyItAndItsGpusInTheOrderOfItsBinding) {
  const std::string a = add("a", {{1, 25, 20 * 1024, -1}, {0, 100, 0, -1}});
  const std::string b = add("b", {{1, 50, 40 * 1024, -1}});
  EXPECT_EQ(a, (root_ / "vgpu" / "tenant-limits" / "a").string());
  vgpu::Mapped<vgpu::LimitsRegion> region;
  ASSERT_EQ(vgpu::open_limits(a.c_str(), false, &region), vgpu::RegionError::kOk);
  const vgpu::LimitsRegion* r = region.region;
  ASSERT_EQ(r->gpu_count.load(), 2u);
  EXPECT_STREQ(r->gpus[0].uuid, "GPU-n-1") << "the binding's first GPU is the job's GPU 0";
  EXPECT_STREQ(r->gpus[1].uuid, "GPU-n-0");
  auto* own = vgpu::find_tenant(region.region, "a");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(vgpu::find_tenant(region.region, "b"), nullptr) << "another job's entry is not in this job's region";
  EXPECT_EQ(own->limits.memory_quota[0].load(), 20 * 1024 * kMiB);
  EXPECT_EQ(own->limits.compute_share[0].load(), 25u);
  EXPECT_EQ(own->limits.memory_quota[1].load(), 80 * 1024 * kMiB) << "a whole GPU: its whole memory";
  EXPECT_EQ(own->limits.compute_share[1].load(), 100u);
  vgpu::unmap(&region);
  ASSERT_EQ(vgpu::open_limits(b.c_str(), false, &region), vgpu::RegionError::kOk);
  EXPECT_EQ(region.region->gpu_count.load(), 1u);
  EXPECT_STREQ(region.region->gpus[0].uuid, "GPU-n-1");
  EXPECT_EQ(vgpu::find_tenant(region.region, "a"), nullptr);
  vgpu::unmap(&region);
}

TEST_F(VgpuNodeTest, TheTenantsOfAGpuAreFoundByItsUuidWhateverIndexEachJobKnowsItBy) {
  add("a", {{1, 25, 20 * 1024, -1}, {0, 100, 0, -1}});  // GPU-n-1 is a's GPU 0
  add("b", {{0, 50, 40 * 1024, -1}, {1, 50, 40 * 1024, -1}});  // and b's GPU 1
  hold("a", 0, 19 * 1024);  // near a's 20 GiB quota on GPU-n-1
  hold("b", 1, 30 * 1024);
  const auto samples = node_->sample(Time{});
  const VgpuTenantSample* a = sample_of(samples, "a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->gpus.size(), 2u);
  EXPECT_EQ(a->gpus[0].uuid, "GPU-n-1");
  EXPECT_EQ(a->gpus[0].usage_bytes, 19 * 1024 * kMiB);
  EXPECT_EQ(a->gpus[1].usage_bytes, 0u);
  const VgpuTenantSample* b = sample_of(samples, "b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->gpus[1].uuid, "GPU-n-1");
  EXPECT_EQ(b->gpus[1].usage_bytes, 30 * 1024 * kMiB);
  // GPU-n-1 has 80 GiB: a (20 GiB) and b (40 GiB) claim 60, so a, near its limit, gets a burst of
  // a quarter of its quota, on the entry of its own region that names GPU-n-1.
  auto actions = node_->control_memory(Time{}, [](const std::string&) { return 0; });
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, VgpuAction::Kind::kBurstGranted);
  EXPECT_EQ(actions[0].job, "a");
  EXPECT_THAT(actions[0].message, HasSubstr("GPU GPU-n-1: limit 20480 MiB -> 25600 MiB"));
  const VgpuTenantSample* after = sample_of(node_->sample(Time{}), "a");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->gpus[0].limit_bytes, 25 * 1024 * kMiB);
  EXPECT_EQ(after->gpus[1].limit_bytes, 80 * 1024 * kMiB) << "its other GPU is left alone";
}

TEST_F(VgpuNodeTest, ARestartedAgentFindsItsTenantsAgainAndARemovedJobLeavesNoFile) {
  const std::string a = add("a", {{1, 25, 20 * 1024, -1}});
  add("b", {{0, 100, 0, -1}});
  node_.reset();
  node_ = open();
  ASSERT_NE(node_, nullptr);
  const auto samples = node_->sample(Time{});
  ASSERT_EQ(samples.size(), 2u);
  const VgpuTenantSample* found = sample_of(samples, "a");
  ASSERT_NE(found, nullptr);
  ASSERT_EQ(found->gpus.size(), 1u);
  EXPECT_EQ(found->gpus[0].uuid, "GPU-n-1");
  EXPECT_EQ(found->gpus[0].quota_bytes, 20 * 1024 * kMiB);
  EXPECT_EQ(found->gpus[0].share_percent, 25u);
  node_->remove_job("a");
  EXPECT_FALSE(fs::exists(a));
  EXPECT_FALSE(fs::exists(root_ / "vgpu" / "tenants" / "a"));
  EXPECT_EQ(node_->sample(Time{}).size(), 1u);
}

TEST_F(VgpuNodeTest, ABindingNamingAGpuTheNodeLacksIsRefusedAndLeavesNoFile) {
  model::NodeBinding binding{"n", {{7, 10, 1024, -1}}};
  auto env = node_->add_job("a", binding, gpus_, std::nullopt, std::nullopt);
  ASSERT_FALSE(env);
  EXPECT_THAT(env.error().to_string(), HasSubstr("placement.gpus.index"));
  EXPECT_THAT(env.error().to_string(), HasSubstr("7"));
  EXPECT_FALSE(fs::exists(root_ / "vgpu" / "tenant-limits" / "a"));
  EXPECT_TRUE(node_->sample(Time{}).empty());
}

// A GPU short of memory its tenants were promised: the job holding more than its quota there is
// named for a move, with what it holds on each of its GPUs in its binding's order, so that the
// server moves it where all of that fits.
TEST_F(VgpuNodeTest, AJobNamedToMoveComesWithWhatItHoldsOnEachOfItsGpus) {
  add("a", {{0, 25, 20 * 1024, -1}, {1, 25, 20 * 1024, -1}});
  add("b", {{1, 75, 60 * 1024, -1}});
  hold("a", 0, 5 * 1024);
  hold("a", 1, 50 * 1024);  // 30 GiB beyond its quota on GPU-n-1
  hold("b", 0, 10 * 1024);  // b is owed 50 GiB there and 20 GiB are free
  auto actions = node_->control_memory(Time{}, [](const std::string&) { return 0; });
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, VgpuAction::Kind::kMoveRequested);
  EXPECT_EQ(actions[0].job, "a");
  EXPECT_THAT(actions[0].message, HasSubstr("GPU GPU-n-1 short of memory: it holds 30720 MiB beyond its 20480 MiB quota"));
  EXPECT_THAT(actions[0].held_bytes, ::testing::ElementsAre(5 * 1024 * kMiB, 50 * 1024 * kMiB));
}

}  // namespace
}  // namespace cnlab::agent
