// Migrations in the allocation experiment: a pod that fits nowhere is placed by moving smaller
// placed pods into holes elsewhere; a move that cannot be completed is undone; for BestFit (whose
// view is the cluster) and CNLab's placer (which keeps its own and must follow every move).
#include "sim/alloc_migration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "sim/alloc_run.h"
#include "sim/policies/best_fit_policy.h"
#include "sim/policies/cnlab_policy.h"

namespace cnlab::sim {
namespace {

Pod sharing(int cpu, int milli) { return Pod{cpu, 1000, 1, milli, kAnyModel}; }
Pod whole(int cpu, int gpus) { return Pod{cpu, 1000, gpus, kGpuMilli, kAnyModel}; }

class MigrationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Two nodes of two V100s each.
    std::vector<OpenbNode> nodes = {{"n0", 64000, 262144, 2, "V100M32"}, {"n1", 64000, 262144, 2, "V100M32"}};
    cluster_ = std::make_unique<AllocCluster>(std::move(AllocCluster::build(nodes).value()));
    std::vector<uint32_t> ranks = {0, 1};
    cluster_->reset(ranks);
    if (GetParam() == "bestfit") policy_ = std::make_unique<BestFitPolicy>();
    else policy_ = std::make_unique<CnlabPolicy>();
    policy_->reset(*cluster_, RunContext{});
    placements_ = std::make_unique<Placements>(cluster_->node_count());
  }

  // Places `pod` at `choice` as the engine would (the policy is told through place_on).
  void put(const Pod& pod, NodeIndex node) {
    policy_->on_arrival(pod);
    auto choice = policy_->place_on(pod, *cluster_, node);
    ASSERT_TRUE(choice.has_value());
    ASSERT_TRUE(cluster_->apply(pod, *choice));
    policy_->on_placed(pod, *choice);
    placements_->add(pod, *choice);
  }
  bool fits_anywhere(const Pod& pod) const {
    for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
      if (cluster_->fits(pod, n)) return true;
    }
    return false;
  }

  std::unique_ptr<AllocCluster> cluster_;
  std::unique_ptr<AllocPolicy> policy_;
  std::unique_ptr<Placements> placements_;
};

TEST_P(MigrationTest, SmallPodsMoveIntoHolesToFreeAWholeGpu) {
  // n0's GPUs hold an 800 each (holes of 200); n1's a 900 and a 150. A whole-GPU pod fits nowhere;
  // moving the 150 into a hole on n0 frees n1's second GPU for it.
  put(sharing(1000, 800), 0);
  put(sharing(1000, 800), 0);
  put(sharing(1000, 900), 1);
  put(sharing(1000, 150), 1);
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  ASSERT_FALSE(fits_anywhere(big));
  int64_t before = cluster_->gpu_allocated_total();
  auto moved = migrate_to_place(big, *cluster_, *policy_, *placements_, MigrationLimits{});
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved, 1);
  EXPECT_EQ(cluster_->gpu_allocated_total(), before + kGpuMilli);
  EXPECT_EQ(cluster_->gpu_allocated_total(), 800 + 800 + 900 + 150 + 1000);  // nothing was lost
  EXPECT_EQ(placements_->on_node(0).size(), 3u);  // the 150 moved there
  // The policy's own view followed the moves: the next pod it places lands where the cluster has room.
  Pod small = sharing(1000, 100);
  policy_->on_arrival(small);
  std::vector<NodeIndex> feasible;
  for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
    if (cluster_->fits(small, n)) feasible.push_back(n);
  }
  ASSERT_FALSE(feasible.empty());
  auto choice = policy_->place(small, *cluster_, feasible);
  ASSERT_TRUE(choice.has_value());
  EXPECT_TRUE(cluster_->apply(small, *choice));
}

TEST_P(MigrationTest, NoMoveHappensWhenTheMovedPodsWouldFitNowhere) {
  // 700 + 700 on n0, 600 + 600 on n1: holes of 300 and 400 hold none of the others.
  put(sharing(1000, 700), 0);
  put(sharing(1000, 700), 0);
  put(sharing(1000, 600), 1);
  put(sharing(1000, 600), 1);
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  int64_t before = cluster_->gpu_allocated_total();
  EXPECT_FALSE(migrate_to_place(big, *cluster_, *policy_, *placements_, MigrationLimits{}).has_value());
  EXPECT_EQ(cluster_->gpu_allocated_total(), before);
  for (NodeIndex n = 0; n < 2; ++n) EXPECT_EQ(placements_->on_node(n).size(), 2u);
}

TEST_P(MigrationTest, AOneGpuWholePodMovesToMakeRoomForAGang) {
  // Each node has one whole-GPU pod and one free GPU: a two-GPU gang fits nowhere until one of the
  // whole-GPU pods moves beside the other.
  put(whole(4000, 1), 0);
  put(whole(4000, 1), 1);
  Pod gang = whole(8000, 2);
  policy_->on_arrival(gang);
  ASSERT_FALSE(fits_anywhere(gang));
  MigrationLimits single_level_only;
  single_level_only.repack_targets = 0;
  ASSERT_FALSE(migrate_to_place(gang, *cluster_, *policy_, *placements_, single_level_only).has_value());
  auto moved = migrate_to_place(gang, *cluster_, *policy_, *placements_, MigrationLimits{});
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved, 1);
  EXPECT_EQ(cluster_->gpu_allocated_total(), 4 * kGpuMilli);
  size_t on0 = placements_->on_node(0).size(), on1 = placements_->on_node(1).size();
  EXPECT_EQ(std::min(on0, on1), 1u);  // the gang alone on one node
  EXPECT_EQ(std::max(on0, on1), 2u);  // both one-GPU pods on the other
  // A gang never moves for another pod: a one-GPU pod still fits nowhere and no move is made.
  Pod one = whole(4000, 1);
  policy_->on_arrival(one);
  EXPECT_FALSE(migrate_to_place(one, *cluster_, *policy_, *placements_, MigrationLimits{}).has_value());
  EXPECT_EQ(cluster_->gpu_allocated_total(), 4 * kGpuMilli);
}

INSTANTIATE_TEST_SUITE_P(Policies, MigrationTest, ::testing::Values("bestfit", "cnlab"),
                         [](const auto& info) { return info.param; });

// BestFit, but it refuses the `refuse_at`-th place_at of a re-pack (0 = the first): stands for a
// policy that cannot follow a planned move.
class RefusingBestFit : public BestFitPolicy {
 public:
  explicit RefusingBestFit(int refuse_at) : refuse_at_(refuse_at) {}
  bool place_at(const Pod& pod, const AllocCluster& cluster, const Choice& choice) override {
    return calls_++ != refuse_at_ && BestFitPolicy::place_at(pod, cluster, choice);
  }

 private:
  int refuse_at_, calls_ = 0;
};

// Three one-GPU nodes: a 700 (300 free), a 600 and a 150 (250 free), a 400 and a 100 (500 free). A
// whole-GPU pod fits nowhere, and no single-level move makes room: the 400 fits no hole, nor does
// the 600 or the 700. Re-packing the three GPUs does: the 400 goes beside the 600 once the 150 has
// gone beside the 700, and the 100 follows it there (a chain of three moves).
class RepackTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::vector<OpenbNode> nodes = {
        {"a", 64000, 262144, 1, "V100M32"}, {"b", 64000, 262144, 1, "V100M32"}, {"c", 64000, 262144, 1, "V100M32"}};
    cluster_ = std::make_unique<AllocCluster>(std::move(AllocCluster::build(nodes).value()));
    std::vector<uint32_t> ranks = {0, 1, 2};
    cluster_->reset(ranks);
    if (GetParam() == "bestfit") policy_ = std::make_unique<BestFitPolicy>();
    else if (GetParam() == "cnlab") policy_ = std::make_unique<CnlabPolicy>();
    else policy_ = std::make_unique<RefusingBestFit>(2);
    policy_->reset(*cluster_, RunContext{});
    placements_ = std::make_unique<Placements>(cluster_->node_count());
    put(sharing(1000, 700), 0);
    put(sharing(1000, 600), 1);
    put(sharing(1000, 150), 1);
    put(sharing(1000, 400), 2);
    put(sharing(1000, 100), 2);
  }

  void put(const Pod& pod, NodeIndex node) {
    policy_->on_arrival(pod);
    auto choice = policy_->place_on(pod, *cluster_, node);
    ASSERT_TRUE(choice.has_value());
    ASSERT_TRUE(cluster_->apply(pod, *choice));
    policy_->on_placed(pod, *choice);
    placements_->add(pod, *choice);
  }
  // The GPU milli of the pods on each node, sorted, as Placements records them.
  std::vector<std::vector<int>> layout() const {
    std::vector<std::vector<int>> out(cluster_->node_count());
    for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
      for (uint32_t p : placements_->on_node(n)) out[n].push_back(placements_->pod(p).gpu_milli);
      std::sort(out[n].begin(), out[n].end());
    }
    return out;
  }
  // What the cluster holds matches the placements: per node, the GPU milli used.
  void expect_cluster_matches_placements() const {
    auto l = layout();
    for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
      int used = 0;
      for (int m : l[n]) used += m;
      EXPECT_EQ(kGpuMilli - cluster_->gpu_free(n)[0], used) << "node " << n;
    }
  }

  std::unique_ptr<AllocCluster> cluster_;
  std::unique_ptr<AllocPolicy> policy_;
  std::unique_ptr<Placements> placements_;
};

class RepackPlacesTest : public RepackTest {};

TEST_P(RepackPlacesTest, OnlyARepackMakesRoomForAWholeGpuPod) {
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  MigrationLimits single_level_only;
  single_level_only.repack_targets = 0;
  ASSERT_FALSE(migrate_to_place(big, *cluster_, *policy_, *placements_, single_level_only).has_value());
  ASSERT_EQ(cluster_->gpu_allocated_total(), 1950);

  auto moved = migrate_to_place(big, *cluster_, *policy_, *placements_, MigrationLimits{});
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved, 3);  // the 400, the 150 and the 100 changed GPU; the 700 and the 600 stayed
  EXPECT_EQ(cluster_->gpu_allocated_total(), 1950 + kGpuMilli);
  EXPECT_EQ(layout(), (std::vector<std::vector<int>>{{100, 150, 700}, {400, 600}, {1000}}));
  expect_cluster_matches_placements();
  // The policy followed every move: a 50 now goes where the cluster has room (node a, 50 free).
  Pod small = sharing(1000, 50);
  policy_->on_arrival(small);
  std::vector<NodeIndex> feasible;
  for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
    if (cluster_->fits(small, n)) feasible.push_back(n);
  }
  ASSERT_EQ(feasible, std::vector<NodeIndex>{0});
  auto choice = policy_->place(small, *cluster_, feasible);
  ASSERT_TRUE(choice.has_value());
  EXPECT_TRUE(cluster_->apply(small, *choice));
}

TEST_P(RepackPlacesTest, ARepackNeedingMoreMovesThanTheBoundIsNotMade) {
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  MigrationLimits two_moves;
  two_moves.repack_moves = 2;
  auto before = layout();
  EXPECT_FALSE(migrate_to_place(big, *cluster_, *policy_, *placements_, two_moves).has_value());
  EXPECT_EQ(layout(), before);
  EXPECT_EQ(cluster_->gpu_allocated_total(), 1950);
}

TEST_P(RepackPlacesTest, ARepackThatCannotFitChangesNothing) {
  // With a 250 beside the 700, the pods and a whole GPU need 3,200 milli of the three GPUs' 3,000.
  put(sharing(1000, 250), 0);
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  auto before = layout();
  EXPECT_FALSE(migrate_to_place(big, *cluster_, *policy_, *placements_, MigrationLimits{}).has_value());
  EXPECT_EQ(layout(), before);
  EXPECT_EQ(cluster_->gpu_allocated_total(), 2200);
  expect_cluster_matches_placements();
}

INSTANTIATE_TEST_SUITE_P(Policies, RepackPlacesTest, ::testing::Values("bestfit", "cnlab"),
                         [](const auto& info) { return info.param; });

class RepackUndoTest : public RepackTest {};

TEST_P(RepackUndoTest, ARepackThePolicyCannotFollowIsUndoneAndNoPlacedPodIsLost) {
  // The policy refuses the third landing (the pod itself, then the 400, then the 150).
  Pod big = whole(4000, 1);
  policy_->on_arrival(big);
  auto before = layout();
  EXPECT_FALSE(migrate_to_place(big, *cluster_, *policy_, *placements_, MigrationLimits{}).has_value());
  EXPECT_EQ(layout(), before);
  EXPECT_EQ(cluster_->gpu_allocated_total(), 1950);
  expect_cluster_matches_placements();
  // The pods are back on their own GPUs: the cluster takes them off and on again as they were.
  for (NodeIndex n = 0; n < cluster_->node_count(); ++n) {
    for (uint32_t p : placements_->on_node(n)) EXPECT_EQ(placements_->choice(p).node, n);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RepackUndoTest, ::testing::Values("refusing"),
                         [](const auto& info) { return info.param; });

// Puts the i-th pod it is asked about on node script[i] (the tightest GPU there), so that a run
// builds RepackTest's cluster; first fit once the script is done.
class ScriptedPolicy : public AllocPolicy {
 public:
  explicit ScriptedPolicy(std::vector<NodeIndex> script) : script_(std::move(script)) {}
  std::string_view name() const override { return "Scripted"; }
  std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible) override {
    NodeIndex n = next_ < script_.size() ? script_[next_++] : feasible[0];
    if (std::find(feasible.begin(), feasible.end(), n) == feasible.end()) return std::nullopt;
    if (pod.kind() == PodKind::kWholeGpu) return Choice{n, lowest_free_gpus(cluster, n, pod.num_gpu)};
    return Choice{n, uint32_t{1} << tightest_gpu(cluster, n, pod.gpu_milli)};
  }

 private:
  std::vector<NodeIndex> script_;
  size_t next_ = 0;
};

TEST(MigrationRun, PodsPlacedByMovingAndEveryMoveAreCounted) {
  std::vector<OpenbNode> nodes = {
      {"a", 64000, 262144, 1, "V100M32"}, {"b", 64000, 262144, 1, "V100M32"}, {"c", 64000, 262144, 1, "V100M32"}};
  AllocCluster cluster = std::move(AllocCluster::build(nodes).value());
  Workload workload;
  workload.name = "repack";
  workload.pods = {sharing(1000, 700), sharing(1000, 600), sharing(1000, 150), sharing(1000, 400), sharing(1000, 100),
                   whole(4000, 1)};
  RunPlan plan{{0, 1, 2, 3, 4, 5}, {0, 1, 2}};
  const std::vector<NodeIndex> script = {0, 1, 1, 2, 2};

  ScriptedPolicy without(script);
  auto still = run_allocation(cluster, workload, plan, without, RunContext{});
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->failed, 1);
  EXPECT_EQ(still->moves, 0);
  EXPECT_EQ(still->allocated_gpu_milli, 1950);

  ScriptedPolicy with(script);
  auto moved = run_allocation(cluster, workload, plan, with, RunContext{}, MigrationLimits{});
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->placed, 6);
  EXPECT_EQ(moved->failed, 0);
  EXPECT_EQ(moved->placed_by_moving, 1);
  EXPECT_EQ(moved->moves, 3);  // the 400, the 150 and the 100
  EXPECT_EQ(moved->allocated_gpu_milli, 2950);
  EXPECT_EQ(moved->leftovers.placed_by_milli.at(kGpuMilli), 1);
}

}  // namespace
}  // namespace cnlab::sim
