#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

const GpuModel& model_named(std::string_view name) { return gpu_model(*find_model(name)); }

TEST(GpuCatalog, HoldsTheDatacenterModelsAndTheTraceModels) {
  for (std::string_view name : {"h200", "h100", "h100nvl", "a100m80", "a100m40", "l40s", "l4", "rtx6000ada",
                                "mi300x", "mi250x", "p100", "t4", "v100m16", "v100m32", "a10", "g2", "g3"}) {
    EXPECT_TRUE(find_model(name)) << name;
  }
  EXPECT_EQ(model_named("h200").memory_mib, 141 * 1024);
  EXPECT_EQ(model_named("h100nvl").memory_mib, 94 * 1024);
  EXPECT_EQ(model_named("mi300x").vendor, Vendor::kAmd);
}

TEST(GpuCatalog, LooksUpNamesIgnoringCaseAsTracesWriteThem) {
  EXPECT_EQ(find_model("V100M32"), find_model("v100m32"));
  EXPECT_FALSE(find_model("h900"));
}

TEST(GpuCatalog, UndisclosedTraceCodesAreNamedModelsWithUnknownMemory) {
  EXPECT_FALSE(model_named("g2").memory_known());
  EXPECT_EQ(model_named("g3").vendor, Vendor::kUndisclosed);
}

TEST(GpuCatalog, UnknownModelErrorListsTheCatalog) {
  auto bad = parse_model("h900", "model");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("h100, h100nvl, h200"));
}

TEST(GpuCatalog, OnlyAmpereAndHopperDatacenterModelsAreMigCapable) {
  for (const auto& m : all_models()) {
    bool expected = m.name == "a100m40" || m.name == "a100m80" || m.name == "h100" || m.name == "h100nvl" ||
                    m.name == "h200";
    EXPECT_EQ(m.mig_capable(), expected) << m.name;
  }
}

struct ProfileCount {
  std::string_view model, profile;
  int max_instances, blocks;
};

void PrintTo(const ProfileCount& p, std::ostream* os) { *os << p.model << ":" << p.profile; }

class MigProfiles : public ::testing::TestWithParam<ProfileCount> {};

TEST_P(MigProfiles, MatchNvidiaCountsAndBlockShares) {
  auto [model, profile, max_instances, blocks] = GetParam();
  auto id = *find_model(model);
  auto index = parse_mig_profile(id, profile, "p");
  ASSERT_TRUE(index) << index.error().to_string();
  const MigProfile& p = gpu_model(id).mig_profiles[*index];
  EXPECT_EQ(p.max_instances(), max_instances);
  EXPECT_EQ(p.blocks(), blocks);
}

INSTANTIATE_TEST_SUITE_P(
    AllModels, MigProfiles,
    ::testing::Values(ProfileCount{"h100", "1g.10gb", 7, 14}, ProfileCount{"h100", "1g.20gb", 4, 14},
                      ProfileCount{"h100", "2g.20gb", 3, 28}, ProfileCount{"h100", "3g.40gb", 2, 42},
                      ProfileCount{"h100", "4g.40gb", 1, 57}, ProfileCount{"h100", "7g.80gb", 1, 100},
                      ProfileCount{"h200", "1g.18gb", 7, 14}, ProfileCount{"h200", "1g.35gb", 4, 14},
                      ProfileCount{"h200", "2g.35gb", 3, 28}, ProfileCount{"h200", "3g.71gb", 2, 42},
                      ProfileCount{"h200", "4g.71gb", 1, 57}, ProfileCount{"h200", "7g.141gb", 1, 100},
                      ProfileCount{"a100m80", "3g.40gb", 2, 42}, ProfileCount{"a100m40", "1g.5gb", 7, 14},
                      ProfileCount{"a100m40", "7g.40gb", 1, 100}, ProfileCount{"h100nvl", "3g.47gb", 2, 42}));

TEST(MigProfiles, ProfileOfAnotherModelIsRefusedWithTheModelsOwnList) {
  auto bad = parse_mig_profile(*find_model("h200"), "3g.40gb", "--gpu");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"));
}

TEST(MigProfiles, NonMigModelNamesTheModelsThatAre) {
  auto bad = parse_mig_profile(*find_model("l4"), "1g.10gb", "--gpu");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("l4 does not support MIG"));
  EXPECT_THAT(bad.error().message, HasSubstr("h100"));
}

}  // namespace
}  // namespace cnlab::model
