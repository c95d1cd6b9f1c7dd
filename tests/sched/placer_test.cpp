#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;

TEST(Placer, PlacesUntilTheClusterIsFullAndLearnsFromArrivals) {
  Placer placer({gpu_node("a", "h100", 2)});
  auto spec = pending_job("j", "h100-60").spec;
  for (JobIndex j = 0; j < 2; ++j) {
    placer.observe(spec);
    auto grants = placer.place(spec, j);
    ASSERT_TRUE(grants);
    EXPECT_EQ((*grants)[0].gpus[0].gpu, static_cast<int>(j)) << "60 + 60 does not fit one GPU";
  }
  placer.observe(spec);
  EXPECT_FALSE(placer.place(spec, 2));
  EXPECT_TRUE(placer.place(pending_job("k", "h100-40").spec, 3));
}

TEST(Placer, AppliesMigChangesToItsNodes) {
  Placer placer({gpu_node("a", "h100", 1)});
  auto grants = placer.place(pending_job("m", "h100:3g.40gb").spec, 0);
  ASSERT_TRUE(grants);
  EXPECT_TRUE(placer.nodes()[0].gpus[0].mig_enabled);
  EXPECT_EQ(placer.nodes()[0].gpus[0].mig_instances.size(), 1u);
  EXPECT_EQ((*grants)[0].gpus[0].mig_start, 0);
}

}  // namespace
}  // namespace cnlab::sched
