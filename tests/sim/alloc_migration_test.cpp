// Migrations in the allocation experiment: a pod that fits nowhere is placed by moving smaller
// placed pods into holes elsewhere; a move that cannot be completed is undone; for BestFit (whose
// view is the cluster) and CNLab's placer (which keeps its own and must follow every move).
#include "sim/alloc_migration.h"

#include <gtest/gtest.h>

#include <memory>

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

INSTANTIATE_TEST_SUITE_P(Policies, MigrationTest, ::testing::Values("bestfit", "cnlab"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace cnlab::sim
