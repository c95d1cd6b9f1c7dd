#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

Time at(std::string_view text) { return *parse_rfc3339(text, "t"); }

Job running_job() {
  Job job;
  job.meta = {"train-7f3a", "uid-1", {{"team", "vision"}}, 7};
  job.spec.project = "vision";
  job.spec.user = "alice";
  job.spec.priority_class = "production";
  job.spec.gpu = *parse_slice("h100-25", "30Gi");
  job.spec.cpu_milli = 4000;
  job.spec.memory_mib = 16384;
  job.spec.deadline = at("2026-12-01T18:00:00Z");
  job.spec.estimated_duration = 2 * kHour;
  job.spec.checkpointable = true;
  job.status.phase = JobPhase::kRunning;
  job.status.submitted_at = at("2026-11-30T10:00:00Z");
  job.status.started_at = at("2026-11-30T10:01:00Z");
  job.status.placement = {{"gpu-12", {{3, 25, 30 * 1024, -1}}}};
  return job;
}

TEST(JobJson, RoundTripsEveryField) {
  Job job = running_job();
  auto back = job_from_json(to_json(job));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);
  EXPECT_EQ(to_json(job)["spec"]["gpu"], "h100-25");
  EXPECT_EQ(to_json(job)["spec"]["vram"], "30Gi");
  EXPECT_EQ(to_json(job)["status"]["phase"], "Running");
}

TEST(JobJson, BadGpuRequestNamesTheJsonPath) {
  Json j = to_json(running_job());
  j["spec"]["gpu"] = "h100-101";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.gpu");
  EXPECT_THAT(bad.error().message, HasSubstr("blocks must be 1..100"));
}

TEST(JobJson, RefusesWrongTypesUnknownFieldsAndHostileNames) {
  Json j = to_json(running_job());
  j["spec"]["cpu_milli"] = "lots";
  EXPECT_EQ(job_from_json(j).error().field, "spec.cpu_milli");

  j = to_json(running_job());
  j["spec"]["gpus"] = "h100";
  auto unknown = job_from_json(j);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().field, "spec.gpus");
  EXPECT_THAT(unknown.error().message, HasSubstr("unknown field"));

  j = to_json(running_job());
  j["spec"]["project"] = "../etc";
  EXPECT_EQ(job_from_json(j).error().field, "spec.project");

  j = to_json(running_job());
  j["metadata"]["name"] = "";
  EXPECT_EQ(job_from_json(j).error().field, "metadata.name");

  j = to_json(running_job());
  j["status"]["placement"][0]["gpus"][0]["blocks"] = 0;
  EXPECT_EQ(job_from_json(j).error().field, "status.placement[0].gpus[0].blocks");

  j = to_json(running_job());
  j["spec"]["deadline"] = "tomorrow";
  EXPECT_EQ(job_from_json(j).error().field, "spec.deadline");

  EXPECT_FALSE(job_from_json(Json::array()));
  EXPECT_FALSE(job_from_json(Json{{"kind", "Node"}}));
}

TEST(JobJson, RunningJobWithoutPlacementIsRefused) {
  Json j = to_json(running_job());
  j["status"].erase("placement");
  EXPECT_THAT(job_from_json(j).error().message, HasSubstr("needs a placement"));
}

Node h100_node() {
  Node node;
  node.meta.name = "gpu-12";
  node.cpu_milli = 96000;
  node.memory_mib = 1024 * 1024;
  for (int i = 0; i < 2; ++i) {
    node.gpus.push_back({i, "GPU-" + std::to_string(i), *find_model("h100"), 80 * 1024, true, false, {}});
  }
  node.gpus[1].mig_enabled = true;
  node.gpus[1].mig_instances = {{*parse_mig_profile(*find_model("h100"), "3g.40gb", "p"), 4}};
  node.idle_since = at("2026-11-30T09:00:00Z");
  return node;
}

TEST(NodeJson, RoundTripsWithMigInstances) {
  Node node = h100_node();
  auto back = node_from_json(to_json(node));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, node);
  EXPECT_EQ(to_json(node)["status"]["gpus"][1]["mig_instances"][0]["profile"], "3g.40gb");
}

TEST(NodeJson, RefusesALayoutNvidiaWouldRefuse) {
  Json j = to_json(h100_node());
  j["status"]["gpus"][1]["mig_instances"].push_back({{"profile", "2g.20gb"}, {"start", 4}});
  auto bad = node_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.gpus[1].mig_instances[1]");
  EXPECT_THAT(bad.error().message, HasSubstr("overlap"));
}

TEST(NodeJson, RefusesMigOnANonMigModelAndUnknownModels) {
  Json j = to_json(h100_node());
  j["status"]["gpus"][0]["model"] = "l4";
  j["status"]["gpus"][0]["mig_enabled"] = true;
  EXPECT_THAT(node_from_json(j).error().message, HasSubstr("l4 does not support MIG"));
  j["status"]["gpus"][0]["model"] = "h900";
  EXPECT_EQ(node_from_json(j).error().field, "status.gpus[0].model");
}

TEST(NodeJson, RefusesGpusOutOfIndexOrder) {
  Json j = to_json(h100_node());
  j["status"]["gpus"][0]["index"] = 5;
  EXPECT_EQ(node_from_json(j).error().field, "status.gpus[0].index");
}

TEST(ProjectJson, RoundTripsAndChecksShares) {
  Project p{{"vision", "", {}, 0}, 2.0, {{"alice", 3.0}}};
  auto back = project_from_json(to_json(p));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, p);
  Json j = to_json(p);
  j["spec"]["share"] = -1;
  EXPECT_EQ(project_from_json(j).error().field, "spec.share");
  j = to_json(p);
  j["spec"]["user_shares"]["bob"] = "many";
  EXPECT_EQ(project_from_json(j).error().field, "spec.user_shares.bob");
}

}  // namespace
}  // namespace cnlab::model
