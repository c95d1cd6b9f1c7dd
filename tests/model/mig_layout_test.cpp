#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

ModelId h100() { return *find_model("h100"); }
int profile(std::string_view name) { return *parse_mig_profile(h100(), name, "p"); }

TEST(MigLayout, SevenSmallestInstancesFillSlotsZeroToSix) {
  MigLayout layout(h100());
  for (int start = 0; start < 7; ++start) ASSERT_TRUE(layout.add(profile("1g.10gb"), start));
  EXPECT_EQ(layout.used_compute(), 7);
  EXPECT_EQ(layout.first_fit(profile("1g.10gb")), -1);
}

TEST(MigLayout, FourGAndThreeGShareTheGpu) {
  auto layout = MigLayout::create(h100(), {{profile("4g.40gb"), 0}, {profile("3g.40gb"), 4}});
  ASSERT_TRUE(layout) << layout.error().to_string();
  EXPECT_EQ(layout->used_slots(), 0xFF);
}

TEST(MigLayout, RefusesAStartTheProfileDoesNotAllow) {
  MigLayout layout(h100());
  auto bad = layout.add(profile("3g.40gb"), 2);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("3g.40gb may start only at slot 0,4"));
  EXPECT_FALSE(layout.add(profile("4g.40gb"), 4));
  EXPECT_FALSE(layout.add(profile("1g.10gb"), 7));
  EXPECT_FALSE(layout.add(profile("2g.20gb"), 6));
}

TEST(MigLayout, RefusesOverlappingInstances) {
  auto bad = MigLayout::create(h100(), {{profile("3g.40gb"), 0}, {profile("2g.20gb"), 2}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "mig_instances[1]");
  EXPECT_THAT(bad.error().message, HasSubstr("overlap"));
}

TEST(MigLayout, SevenGExcludesEverythingElse) {
  MigLayout layout(h100());
  ASSERT_TRUE(layout.add(profile("7g.80gb"), 0));
  for (int p = 0; p < 6; ++p) EXPECT_EQ(layout.first_fit(p), -1);
}

TEST(MigLayout, FirstFitKeepsHighSlotsForLargerProfiles) {
  MigLayout layout(h100());
  ASSERT_TRUE(layout.add(profile("1g.10gb"), layout.first_fit(profile("1g.10gb"))));
  EXPECT_EQ(layout.instances()[0].start, 0);
  EXPECT_EQ(layout.first_fit(profile("3g.40gb")), 4);
}

TEST(MigLayout, RemovingAnInstanceFreesItsSlots) {
  MigLayout layout(h100());
  ASSERT_TRUE(layout.add(profile("3g.40gb"), 0));
  ASSERT_TRUE(layout.add(profile("3g.40gb"), 4));
  EXPECT_EQ(layout.first_fit(profile("1g.10gb")), -1);
  EXPECT_TRUE(layout.remove(4));
  EXPECT_FALSE(layout.remove(4));
  EXPECT_EQ(layout.first_fit(profile("1g.10gb")), 4);
  EXPECT_EQ(layout.to_string(), "3g.40gb@0");
}

// Exhaustive: every sequence of adds accepted by the layout keeps slots disjoint and compute <= 7.
TEST(MigLayout, NoSequenceOfAcceptedAddsBreaksTheHardwareLimits) {
  std::vector<MigLayout> frontier{MigLayout(h100())};
  int layouts_seen = 0;
  while (!frontier.empty()) {
    MigLayout layout = frontier.back();
    frontier.pop_back();
    ++layouts_seen;
    int slots = 0, compute = 0;
    for (const auto& instance : layout.instances()) {
      const MigProfile& p = gpu_model(h100()).mig_profiles[instance.profile];
      slots += p.memory_slots;
      compute += p.compute_slices;
    }
    ASSERT_LE(compute, kMigComputeSlices);
    ASSERT_EQ(slots, __builtin_popcount(layout.used_slots()));  // disjoint
    for (int p = 0; p < 6; ++p) {
      for (int start = 0; start < kMigMemorySlots; ++start) {
        MigLayout next = layout;
        // Only extend in a canonical order (by start) to keep the search finite and small.
        if (!next.instances().empty() && start <= next.instances().back().start) continue;
        if (next.add(p, start)) frontier.push_back(next);
      }
    }
  }
  EXPECT_GT(layouts_seen, 20);
}

}  // namespace
}  // namespace cnlab::model
