// Each baseline on a three-node cluster whose scores are computed by hand below.
//
// Cluster (ranks: n1 = 0, n2 = 1, n0 = 2, so among equal scores n1 beats n2 beats n0):
//   n0: 32000 CPU, 2 x T4   after the setup: cL 24000, GPU free [400, 1000]        gL 1400
//   n1: 64000 CPU, 4 x V100 after the setup: cL 44000, GPU free [0, 700, 1000, 1000] gL 2700
//   n2: 16000 CPU, 1 x T4   empty:           cL 16000, GPU free [1000]             gL 1000
// Setup pods: on n0 a sharing pod (cpu 8000, 600 milli) on GPU 0; on n1 a 1-GPU pod (cpu 16000)
// on GPU 0 and a sharing pod (cpu 4000, 300 milli) on GPU 1. Tags: n0 {share}, n1 {1-gpu, share}.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <memory>

#include "sim/alloc_cluster.h"
#include "sim/policies/best_fit_policy.h"
#include "sim/policies/dot_prod_policy.h"
#include "sim/policies/fgd_policy.h"
#include "sim/policies/gpu_clustering_policy.h"
#include "sim/policies/gpu_packing_policy.h"
#include "sim/policies/random_policy.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {
namespace {

Pod sharing(int cpu, int milli) { return Pod{cpu, 1000, 1, milli, kAnyModel}; }
Pod whole(int cpu, int gpus) { return Pod{cpu, 1000, gpus, kGpuMilli, kAnyModel}; }
Pod cpu_only(int cpu) { return Pod{cpu, 1000, 0, 0, kAnyModel}; }

// FGD's typical pods, K = 10:
//   m1 CPU-only (cpu 2000)                 count 2, p 0.2
//   m2 sharing 500 milli (cpu 4000)        count 5, p 0.5
//   m3 one whole GPU (cpu 8000)            count 2, p 0.2
//   m4 two whole GPUs (cpu 8000)           count 1, p 0.1
TypicalPods typical() {
  TypicalPods t;
  t.types = {{2000, 0, 0, "", kAnyModel, 2},
             {4000, 500, 1, "", kAnyModel, 5},
             {8000, 1000, 1, "", kAnyModel, 2},
             {8000, 1000, 2, "", kAnyModel, 1}};
  t.kept_pods = t.total_pods = 10;
  t.total_types = 4;
  return t;
}

class BaselinePolicies : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<OpenbNode> nodes = {{"n0", 32000, 65536, 2, "T4"},
                                    {"n1", 64000, 131072, 4, "V100"},
                                    {"n2", 16000, 32768, 1, "T4"}};
    cluster_ = std::move(AllocCluster::build(nodes).value());
    std::vector<uint32_t> ranks = {2, 0, 1};
    cluster_.reset(ranks);
    policies_.push_back(std::make_unique<RandomPolicy>());
    policies_.push_back(std::make_unique<DotProdPolicy>());
    policies_.push_back(std::make_unique<GpuClusteringPolicy>());
    policies_.push_back(std::make_unique<GpuPackingPolicy>());
    policies_.push_back(std::make_unique<BestFitPolicy>());
    policies_.push_back(std::make_unique<FgdPolicy>(typical()));
    RunContext context{"hand", 7, 130};
    for (auto& p : policies_) p->reset(cluster_, context);
    place(sharing(8000, 600), {0, 0b1});
    place(whole(16000, 1), {1, 0b1});
    place(sharing(4000, 300), {1, 0b10});
  }

  void place(const Pod& pod, Choice choice) {
    ASSERT_TRUE(cluster_.apply(pod, choice));
    for (auto& p : policies_) p->on_placed(pod, choice);
  }

  std::vector<NodeIndex> feasible(const Pod& pod) const {
    std::vector<NodeIndex> out;
    for (NodeIndex n = 0; n < cluster_.node_count(); ++n) {
      if (cluster_.fits(pod, n)) out.push_back(n);
    }
    return out;
  }

  Choice choose(const std::string& key, const Pod& pod) {
    AllocPolicy* policy = nullptr;
    for (auto& p : policies_) {
      if (to_lower(p->name()) == key) policy = p.get();
    }
    EXPECT_NE(policy, nullptr) << key;
    auto choice = policy->place(pod, cluster_, feasible(pod));
    EXPECT_TRUE(choice.has_value()) << key;
    return choice.value_or(Choice{99, 0});
  }

  FgdPolicy& fgd() { return static_cast<FgdPolicy&>(*policies_[5]); }

  AllocCluster cluster_;
  std::vector<std::unique_ptr<AllocPolicy>> policies_;
};

bool same(const Choice& a, const Choice& b) { return a.node == b.node && a.gpus == b.gpus; }
#define EXPECT_CHOICE(actual, node_, gpus_) \
  EXPECT_TRUE(same((actual), Choice{node_, gpus_})) << "got node " << (actual).node << " gpus " << (actual).gpus

TEST_F(BaselinePolicies, SetupStateIsAsTheCommentSays) {
  EXPECT_EQ(cluster_.cpu_free(0), 24000);
  EXPECT_EQ(cluster_.gpu_free_total(0), 1400);
  EXPECT_EQ(cluster_.cpu_free(1), 44000);
  EXPECT_EQ(cluster_.gpu_free_total(1), 2700);
  EXPECT_EQ(cluster_.fully_free_gpus(1), 2);
  EXPECT_EQ(cluster_.gpu_allocated_total(), 1900);
}

// Sharing pod: cpu 4000, 400 milli; every node is feasible.
TEST_F(BaselinePolicies, DotProdTiesOnASharingPodAndTheLowerRankWins) {
  // n0: 100 - 50*(24000*4000/128000^2 + 1400*400/8000^2) = 100 - 50*(0.005859375 + 0.00875) = 99.27 -> 99
  // n1: 100 - 50*(0.0107421875 + 0.016875) = 98.62 -> 98
  // n2: 100 - 50*(0.00390625 + 0.00625) = 99.49 -> 99; tie with n0, n2 has the lower rank.
  Pod pod = sharing(4000, 400);
  EXPECT_EQ(DotProdPolicy::score(pod, cluster_, 0), 99);
  EXPECT_EQ(DotProdPolicy::score(pod, cluster_, 1), 98);
  EXPECT_EQ(DotProdPolicy::score(pod, cluster_, 2), 99);
  EXPECT_CHOICE(choose("dotprod", pod), 2u, 0b1u);
}

TEST_F(BaselinePolicies, GpuClusteringJoinsTheNodeOfSharingPodsOnly) {
  // n0: floor(25*6600/8000) = 20, S = {share} = {tag} -> +75 = 95
  // n1: floor(25*5300/8000) = 16, share in S among others -> +50 = 66
  // n2: floor(25*7000/8000) = 21, S empty -> +25 = 46
  // n0 wins; its tightest GPU with >= 400 free is GPU 0 (400).
  Pod pod = sharing(4000, 400);
  auto& clustering = static_cast<GpuClusteringPolicy&>(*policies_[2]);
  EXPECT_EQ(clustering.score(pod, cluster_, 0), 95);
  EXPECT_EQ(clustering.score(pod, cluster_, 1), 66);
  EXPECT_EQ(clustering.score(pod, cluster_, 2), 46);
  EXPECT_CHOICE(choose("gpuclustering", pod), 0u, 0b1u);
}

TEST_F(BaselinePolicies, GpuPackingPrefersTheTightestPartlyUsedGpu) {
  // n0: walk [400 (g0), 1000 (g1)], take g0, not fully free: max(100 - floor(floor(400*100/1000)/10), 50) = 96
  // n1: walk [0, 700, 1000, 1000], take g1 (700): 100 - floor(70/10) = 93
  // n2: every GPU fully free: 33 - 1 = 32
  Pod pod = sharing(4000, 400);
  EXPECT_EQ(GpuPackingPolicy::score(pod, cluster_, 0), 96);
  EXPECT_EQ(GpuPackingPolicy::score(pod, cluster_, 1), 93);
  EXPECT_EQ(GpuPackingPolicy::score(pod, cluster_, 2), 32);
  EXPECT_CHOICE(choose("gpupacking", pod), 0u, 0b1u);
}

TEST_F(BaselinePolicies, BestFitRescalesOverTheFeasibleNodes) {
  // raw n0: 100*(1 - 0.5*20000/128000 - 0.5*1000/8000) = 100*(1 - 0.078125 - 0.0625) = 85.94 -> 85
  // raw n1: 100*(1 - 0.15625 - 0.14375) = 70
  // raw n2: 100*(1 - 0.046875 - 0.0375) = 91.56 -> 91
  // rescaled over [70, 91]: n0 floor(15*100/21) = 71, n1 0, n2 100 -> n2, GPU 0.
  Pod pod = sharing(4000, 400);
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 0), 85);
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 1), 70);
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 2), 91);
  EXPECT_CHOICE(choose("bestfit", pod), 2u, 0b1u);
}

TEST_F(BaselinePolicies, FgdFragmentationMatchesTheDefinition) {
  // n0 (I 1400, free [400, 1000]): m1 I = 1400; m2 one GPU >= 500 -> free below 500 = 400;
  //   m3 one fully free GPU -> 400; m4 needs two -> I = 1400.
  //   F = 0.2*1400 + 0.5*400 + 0.2*400 + 0.1*1400 = 700
  // n1 (I 2700, free [0, 700, 1000, 1000]): m1 2700; m2 three GPUs >= 500 -> 0; m3 -> 0 + 700 = 700;
  //   m4 two fully free -> 700. F = 540 + 0 + 140 + 70 = 750
  // n2 (I 1000): m1 1000; m2 0; m3 0; m4 1000. F = 200 + 100 = 300
  EXPECT_DOUBLE_EQ(fgd().fragmentation(cluster_, 0), 700);
  EXPECT_DOUBLE_EQ(fgd().fragmentation(cluster_, 1), 750);
  EXPECT_DOUBLE_EQ(fgd().fragmentation(cluster_, 2), 300);
}

TEST_F(BaselinePolicies, FgdTriesEveryGpuOfASharingPod) {
  // n0 via GPU 0 -> [0, 1000], I 1000: m1 1000, m2 0, m3 0, m4 1000: F = 300, dF = 400,
  //   floor(100*sigmoid(0.4)) = floor(59.87) = 59
  // n0 via GPU 1 -> [400, 600]: m1 1000, m2 400, m3 I, m4 I: F = 200+200+200+100 = 700, dF 0 -> 50
  // n1 via GPU 1 -> [0, 300, 1000, 1000], I 2300: F = 460 + 0.5*300 + 0.2*300 + 0.1*300 = 700,
  //   dF 50 -> floor(100*sigmoid(0.05)) = 51
  // n1 via GPU 2 -> [0, 700, 600, 1000]: F = 460 + 0 + 0.2*1300 + 0.1*2300 = 950, dF -200 -> 45
  //   (GPU 3 equals GPU 2 and loses the tie to the lower index)
  // n2 via GPU 0 -> [600], I 600, CPU 12000: F = 120 + 0 + 120 + 60 = 300, dF 0 -> 50
  Pod pod = sharing(4000, 400);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 0).score, 59);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 0).gpu, 0);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 1).score, 51);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 1).gpu, 1);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 2).score, 50);
  EXPECT_CHOICE(choose("fgd", pod), 0u, 0b1u);
}

TEST_F(BaselinePolicies, RandomPicksUniformlyAmongFeasibleNodesAndFittingGpus) {
  Pod pod = sharing(4000, 400);
  int per_node[3] = {0, 0, 0};
  int n1_gpu[4] = {0, 0, 0, 0};
  RandomPolicy random;
  random.reset(cluster_, RunContext{"hand", 11, 130});
  constexpr int kDraws = 3000;
  for (int i = 0; i < kDraws; ++i) {
    Choice c = random.place(pod, cluster_, feasible(pod)).value();
    ASSERT_LT(c.node, 3u);
    ++per_node[c.node];
    int g = std::countr_zero(c.gpus);
    ASSERT_GE(cluster_.gpu_free(c.node)[static_cast<size_t>(g)], 400);
    if (c.node == 1) ++n1_gpu[g];
  }
  // Each of 3 nodes about 1000 times (binomial sd ~26); on n1 GPUs 1, 2, 3 about a third each.
  for (int n : per_node) EXPECT_NEAR(n, kDraws / 3, 150);
  EXPECT_EQ(n1_gpu[0], 0);
  for (int g = 1; g < 4; ++g) EXPECT_NEAR(n1_gpu[g], per_node[1] / 3, 100);
}

TEST_F(BaselinePolicies, RandomIsReproducibleForASeed) {
  Pod pod = sharing(4000, 400);
  auto draws = [&](uint64_t seed) {
    RandomPolicy random;
    random.reset(cluster_, RunContext{"hand", seed, 130});
    std::vector<uint32_t> out;
    for (int i = 0; i < 50; ++i) {
      Choice c = random.place(pod, cluster_, feasible(pod)).value();
      out.push_back(c.node * 100 + c.gpus);
    }
    return out;
  };
  EXPECT_EQ(draws(5), draws(5));
  EXPECT_NE(draws(5), draws(6));
}

// One-GPU pod: cpu 2000; feasible n0 (GPU 1), n1 (GPUs 2, 3), n2 (GPU 0).
TEST_F(BaselinePolicies, OneWholeGpuPod) {
  Pod pod = whole(2000, 1);
  // DotProd: n0 100 - 50*(0.0029296875 + 0.021875) = 98.76 -> 98; n1 100 - 50*(0.00537109375 + 0.0421875)
  //   = 97.62 -> 97; n2 100 - 50*(0.001953125 + 0.015625) = 99.12 -> 99 -> n2, GPU 0.
  EXPECT_CHOICE(choose("dotprod", pod), 2u, 0b1u);
  // GpuPacking: n0 and n1 take one fully free GPU: max(50 - 1, 33) = 49; n2 all free: 32.
  //   Tie n0/n1 -> n1 (rank 0), its lowest fully free GPU is 2.
  EXPECT_EQ(GpuPackingPolicy::score(pod, cluster_, 0), 49);
  EXPECT_EQ(GpuPackingPolicy::score(pod, cluster_, 1), 49);
  EXPECT_CHOICE(choose("gpupacking", pod), 1u, 0b100u);
  // GpuClustering, tag 1-gpu: n0 S = {share}: 20 + 0; n1 {1-gpu, share}: 16 + 50 = 66; n2 21 + 25 = 46.
  EXPECT_CHOICE(choose("gpuclustering", pod), 1u, 0b100u);
  // BestFit raw: n0 100*(1 - 0.0859375 - 0.025) = 88.9 -> 88; n1 100*(1 - 0.1640625 - 0.10625) = 72.97 -> 72;
  //   n2 100*(1 - 0.0546875 - 0) = 94.5 -> 94 -> n2.
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 0), 88);
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 1), 72);
  EXPECT_EQ(BestFitPolicy::raw_score(pod, cluster_, 2), 94);
  EXPECT_CHOICE(choose("bestfit", pod), 2u, 0b1u);
  // FGD: n0 -> [400, 0], I 400: F = 80 + 0.5*400 + 0.2*400 + 0.1*400 = 400, dF 300 -> floor(57.44) = 57
  //   n1 -> [0, 700, 0, 1000], I 1700: F = 340 + 0 + 0.2*700 + 0.1*1700 = 650, dF 100 -> 52
  //   n2 -> [0]: F = 0, dF 300 -> 57. Tie n0/n2 -> n2 (rank 1 < 2).
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 0).score, 57);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 1).score, 52);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 2).score, 57);
  EXPECT_CHOICE(choose("fgd", pod), 2u, 0b1u);
}

TEST_F(BaselinePolicies, TwoGpuPodHasOneFeasibleNodeAndTakesItsLowestFreeGpus) {
  // Only n1 has two fully free GPUs (2 and 3): taken unscored by every policy.
  Pod pod = whole(8000, 2);
  ASSERT_EQ(feasible(pod), std::vector<NodeIndex>{1});
  for (const char* key : {"random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"}) {
    EXPECT_CHOICE(choose(key, pod), 1u, 0b1100u);
  }
}

// CPU-only pod: cpu 20000; feasible n0 (24000 free) and n1 (44000); n2 has 16000.
TEST_F(BaselinePolicies, CpuOnlyPod) {
  Pod pod = cpu_only(20000);
  ASSERT_EQ(feasible(pod), (std::vector<NodeIndex>{0, 1}));
  // DotProd: n0 100 - 50*24000*20000/128000^2 = 98.54 -> 98; n1 100 - 50*0.0537109375 = 97.31 -> 97.
  EXPECT_CHOICE(choose("dotprod", pod), 0u, 0u);
  // GpuClustering and GpuPacking score 0 everywhere: the lower rank, n1.
  EXPECT_CHOICE(choose("gpuclustering", pod), 1u, 0u);
  EXPECT_CHOICE(choose("gpupacking", pod), 1u, 0u);
  // BestFit raw: n0 100*(1 - 0.015625 - 0.0875) = 89.7 -> 89; n1 100*(1 - 0.09375 - 0.16875) = 73.75 -> 73.
  EXPECT_CHOICE(choose("bestfit", pod), 0u, 0u);
  // FGD: on n0 the CPU left (4000) no longer holds m3 (cpu 8000): f_m3 = I = 1400,
  //   F = 280 + 200 + 280 + 140 = 900, dF -200 -> floor(100*sigmoid(-0.2)) = 45.
  //   On n1 (24000 left) nothing changes: dF 0 -> 50. n1 wins.
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 0).score, 45);
  EXPECT_EQ(fgd().evaluate(pod, cluster_, 1).score, 50);
  EXPECT_CHOICE(choose("fgd", pod), 1u, 0u);
}

TEST_F(BaselinePolicies, GpuSpecLimitsTheFilter) {
  Pod pod = sharing(1000, 100);
  std::vector<std::string> spec = {"V100", "A100"};
  pod.allowed_models = cluster_.model_mask(spec);
  EXPECT_EQ(feasible(pod), std::vector<NodeIndex>{1});
  std::vector<std::string> unknown = {"A100"};
  pod.allowed_models = cluster_.model_mask(unknown);
  EXPECT_TRUE(feasible(pod).empty());
}

TEST(PolicyRegistry, FactoryAcceptsTheSixNamesAndListsThemOtherwise) {
  for (const std::string& key : baseline_policy_keys()) {
    auto policy = make_baseline_policy(key, TypicalPods{});
    ASSERT_TRUE(policy) << key;
    EXPECT_EQ(to_lower((*policy)->name()), key);
  }
  EXPECT_EQ((*make_baseline_policy("BestFit", TypicalPods{}))->name(), "BestFit");
  auto bad = make_baseline_policy("tetris", TypicalPods{});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().value, "tetris");
  EXPECT_NE(bad.error().message.find("random, dotprod, gpuclustering, gpupacking, bestfit, fgd"), std::string::npos);
}

TEST(PolicyRegistry, AnOnlinePolicyCanBeAddedUnderAFreshKey) {
  class Nothing : public AllocPolicy {
   public:
    std::string_view name() const override { return "Nothing"; }
    std::optional<Choice> place(const Pod&, const AllocCluster&, std::span<const NodeIndex>) override {
      return std::nullopt;
    }
  };
  PolicyRegistry registry = PolicyRegistry::with_baselines();
  ASSERT_TRUE(registry.add("nothing", [] { return std::make_unique<Nothing>(); }));
  EXPECT_FALSE(registry.add("nothing", [] { return std::make_unique<Nothing>(); }));
  EXPECT_FALSE(registry.add("Bad Key", [] { return std::make_unique<Nothing>(); }));
  EXPECT_EQ(registry.keys().back(), "nothing");
  Workload workload;
  auto made = registry.make("nothing", workload);
  ASSERT_TRUE(made);
  EXPECT_EQ((*made)->name(), "Nothing");
  auto unknown = registry.make("cnlab", workload);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("nothing"), std::string::npos);
}

}  // namespace
}  // namespace cnlab::sim
