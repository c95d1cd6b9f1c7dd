// Quotas: every limit round-trips, absent limits stay unlimited, and bad input names its JSON path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

Quota alice_in_vision() {
  Quota quota;
  quota.meta = {"vision-alice", "uid-q", {}, 2};
  quota.project = "vision";
  quota.user = "alice";
  quota.blocks_per_model = {{"h100", 400}, {"a100m80", 150}};
  quota.gpus = 8;
  quota.concurrent_jobs = 20;
  quota.gpu_hours = 1000.5;
  quota.gpu_hours_window = 30 * kDay;
  quota.borrowing = true;
  return quota;
}

TEST(QuotaJson, RoundTripsEveryField) {
  Quota quota = alice_in_vision();
  Json j = to_json(quota);
  EXPECT_EQ(j["spec"], Json({{"project", "vision"},
                             {"user", "alice"},
                             {"blocks_per_model", {{"a100m80", 150}, {"h100", 400}}},
                             {"gpus", 8},
                             {"concurrent_jobs", 20},
                             {"gpu_hours", 1000.5},
                             {"gpu_hours_window", "30d"},
                             {"borrowing", true}}));
  auto back = quota_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, quota);
}

TEST(QuotaJson, AbsentLimitsAreUnlimitedAndTheWindowDefaultsToSevenDays) {
  auto quota = quota_from_json(Json::parse(R"({"kind":"Quota","metadata":{"name":"vision"},
                                               "spec":{"project":"vision"}})"));
  ASSERT_TRUE(quota) << quota.error().to_string();
  EXPECT_EQ(quota->user, "");
  EXPECT_TRUE(quota->blocks_per_model.empty());
  EXPECT_FALSE(quota->gpus);
  EXPECT_FALSE(quota->concurrent_jobs);
  EXPECT_FALSE(quota->gpu_hours);
  EXPECT_EQ(quota->gpu_hours_window, 7 * kDay);
  EXPECT_FALSE(quota->borrowing);

  Json j = to_json(*quota);
  EXPECT_FALSE(j["spec"].contains("gpus"));
  EXPECT_FALSE(j["spec"].contains("concurrent_jobs"));
  EXPECT_FALSE(j["spec"].contains("gpu_hours"));
  auto back = quota_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, *quota);
}

TEST(QuotaJson, ZeroLimitsAreKeptApartFromAbsentOnes) {
  Quota quota = alice_in_vision();
  quota.gpus = 0;
  quota.concurrent_jobs = 0;
  quota.gpu_hours = 0.0;
  auto back = quota_from_json(to_json(quota));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->gpus, 0);
  EXPECT_EQ(back->concurrent_jobs, 0);
  EXPECT_EQ(back->gpu_hours, 0.0);
}

TEST(QuotaJson, UnknownModelNamesItsKeyAndListsTheCatalog) {
  Json j = to_json(alice_in_vision());
  j["spec"]["blocks_per_model"]["h900"] = 100;
  auto bad = quota_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.blocks_per_model.h900");
  EXPECT_THAT(bad.error().message, HasSubstr("known models:"));
  EXPECT_THAT(bad.error().message, HasSubstr("h100"));
}

TEST(QuotaJson, AnyIsNotAModelForAQuota) {
  Json j = to_json(alice_in_vision());
  j["spec"]["blocks_per_model"]["any"] = 100;
  auto bad = quota_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.blocks_per_model.any");
  EXPECT_THAT(bad.error().message, HasSubstr("\"any\" is not one"));

  Quota built = alice_in_vision();
  built.blocks_per_model["any"] = 5;
  EXPECT_EQ(validate(built).error().field, "spec.blocks_per_model.any");
}

TEST(QuotaJson, ModelNamesAreStoredAsTheCatalogWritesThem) {
  Json j = to_json(alice_in_vision());
  j["spec"]["blocks_per_model"] = {{"H100", 400}};
  auto quota = quota_from_json(j);
  ASSERT_TRUE(quota) << quota.error().to_string();
  EXPECT_EQ(quota->blocks_per_model, (std::map<std::string, int64_t>{{"h100", 400}}));

  j["spec"]["blocks_per_model"] = {{"H100", 400}, {"h100", 100}};
  auto twice = quota_from_json(j);
  ASSERT_FALSE(twice);
  EXPECT_THAT(twice.error().message, HasSubstr("repeats the model \"h100\""));

  Quota built = alice_in_vision();
  built.blocks_per_model = {{"H100", 400}};
  EXPECT_THAT(validate(built).error().message, HasSubstr("write the model as \"h100\""));
}

TEST(QuotaJson, BadLimitsNameTheirPath) {
  const std::pair<const char*, Json> bad_values[] = {
      {"gpus", -1},
      {"gpus", 1.5},
      {"concurrent_jobs", -3},
      {"gpu_hours", -0.5},
      {"gpu_hours", "lots"},
      {"gpu_hours_window", "0s"},
      {"gpu_hours_window", "a week"},
      {"borrowing", 1},
      {"project", "../x"},
      {"user", "Alice"},
  };
  for (const auto& [field, value] : bad_values) {
    Json j = to_json(alice_in_vision());
    j["spec"][field] = value;
    auto bad = quota_from_json(j);
    ASSERT_FALSE(bad) << field << "=" << value.dump();
    EXPECT_EQ(bad.error().field, std::string("spec.") + field) << value.dump();
  }
  Json j = to_json(alice_in_vision());
  j["spec"]["blocks_per_model"]["h100"] = -5;
  EXPECT_EQ(quota_from_json(j).error().field, "spec.blocks_per_model.h100");
  j = to_json(alice_in_vision());
  j["spec"]["blocks_per_model"]["h100"] = "many";
  EXPECT_EQ(quota_from_json(j).error().field, "spec.blocks_per_model.h100");
  j = to_json(alice_in_vision());
  j["spec"].erase("project");
  EXPECT_EQ(quota_from_json(j).error().field, "spec.project");
}

TEST(QuotaJson, UnknownFieldsAndStatusAreRefused) {
  Json j = to_json(alice_in_vision());
  j["spec"]["memory_mib"] = 100;
  auto bad = quota_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.memory_mib");
  EXPECT_THAT(bad.error().message, HasSubstr("unknown field"));
  j = to_json(alice_in_vision());
  j["status"] = {{"used_gpus", 3}};
  EXPECT_EQ(quota_from_json(j).error().field, "status");
}

}  // namespace
}  // namespace cnlab::model
