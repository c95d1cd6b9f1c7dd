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

// A finished job with every field the control plane added set.
Job finished_job() {
  Job job = running_job();
  job.spec.min_runtime = 10 * kMinute;
  job.spec.command = {"python", "train.py", "--epochs", "3"};
  job.spec.env = {{"WANDB_MODE", "offline"}, {"_PRIVATE", ""}, {"seed2", "42"}};
  job.spec.working_dir = "src/train";
  job.spec.workspace = WorkspaceRef{"sha256:" + std::string(64, 'a'), 123456};
  job.status.phase = JobPhase::kFailed;
  job.status.last_checkpoint_at = at("2026-11-30T10:30:00Z");
  job.status.message = "exited with status 137";
  job.status.finished_at = at("2026-11-30T11:00:00Z");
  job.status.exit_code = 137;
  job.status.signal = 9;
  job.status.waiting_reason = "waiting for 25 blocks of h100";
  job.status.cancel_requested = true;
  job.status.attempts = 2;
  job.status.awaiting_release =
      PendingRelease{{"gpu-1", "gpu-2"}, at("2026-11-30T10:40:00Z"), {"node gpu-3 stopped it and stored its checkpoint"}};
  Time t = at("2026-11-30T10:00:00Z");
  // Every type there is, the last one named here (a new type goes last, or this stops short of it).
  for (int i = 0; i <= static_cast<int>(JobEventType::kReleased); ++i) {
    const auto type = static_cast<JobEventType>(i);
    job.status.events.push_back(
        {type, t, type == JobEventType::kQueued ? "" : "because " + std::string(to_string(type))});
    t += kMinute;
  }
  return job;
}

TEST(JobJson, RoundTripsEveryControlPlaneField) {
  Job job = finished_job();
  Json j = to_json(job);
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);
  EXPECT_EQ(j["spec"]["command"], Json({"python", "train.py", "--epochs", "3"}));
  EXPECT_EQ(j["spec"]["env"]["WANDB_MODE"], "offline");
  EXPECT_EQ(j["spec"]["working_dir"], "src/train");
  EXPECT_EQ(j["spec"]["workspace"]["size_bytes"], 123456);
  EXPECT_EQ(j["status"]["events"][1],
            Json({{"type", "Scheduled"}, {"time", "2026-11-30T10:01:00Z"}, {"reason", "because Scheduled"}}));
  EXPECT_FALSE(j["status"]["events"][0].contains("reason"));
  EXPECT_EQ(j["status"]["events"].back()["type"], "Released");
  EXPECT_EQ(j["status"]["awaiting_release"],
            Json({{"nodes", {"gpu-1", "gpu-2"}},
                  {"since", "2026-11-30T10:40:00Z"},
                  {"released", {"node gpu-3 stopped it and stored its checkpoint"}}}));
  EXPECT_EQ(j["status"]["exit_code"], 137);
  EXPECT_EQ(j["status"]["signal"], 9);
  EXPECT_EQ(j["status"]["finished_at"], "2026-11-30T11:00:00Z");
  EXPECT_EQ(j["status"]["cancel_requested"], true);
  EXPECT_EQ(j["status"]["attempts"], 2);
  EXPECT_EQ(j["status"]["waiting_reason"], "waiting for 25 blocks of h100");
}

TEST(JobJson, JsonWrittenBeforeTheControlPlaneFieldsStillDecodes) {
  Json old = Json::parse(R"({
    "kind": "Job",
    "metadata": {"name": "train-7f3a"},
    "spec": {"project": "vision", "user": "alice", "priority_class": "dev", "gpu": "h100-25",
             "cpu_milli": 0, "memory_mib": 0, "checkpointable": false},
    "status": {"phase": "Pending", "submitted_at": "2026-11-30T10:00:00Z"}
  })");
  auto job = job_from_json(old);
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_TRUE(job->spec.command.empty());
  EXPECT_TRUE(job->spec.env.empty());
  EXPECT_EQ(job->spec.working_dir, "");
  EXPECT_FALSE(job->spec.workspace);
  EXPECT_FALSE(job->status.finished_at);
  EXPECT_FALSE(job->status.exit_code);
  EXPECT_FALSE(job->status.signal);
  EXPECT_TRUE(job->status.events.empty());
  EXPECT_FALSE(job->status.cancel_requested);
  EXPECT_EQ(job->status.attempts, 0);
}

TEST(JobJson, UserMayBeLeftForTheServerToFillButMustBeANameWhenGiven) {
  Json j = to_json(running_job());
  j["spec"].erase("user");
  auto job = job_from_json(j);
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_EQ(job->spec.user, "");

  j["spec"]["user"] = "";
  ASSERT_TRUE(job_from_json(j));

  j["spec"]["user"] = "../alice";
  EXPECT_EQ(job_from_json(j).error().field, "spec.user");
  j["spec"]["user"] = 7;
  EXPECT_EQ(job_from_json(j).error().field, "spec.user");
}

TEST(JobJson, ProjectIsStillRequired) {
  Json j = to_json(running_job());
  j["spec"].erase("project");
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.project");
  EXPECT_THAT(bad.error().message, HasSubstr("required"));
}

TEST(JobJson, ScheduledJobRoundTripsAndNeedsAPlacement) {
  Job job = running_job();
  job.status.phase = JobPhase::kScheduled;
  job.status.started_at.reset();
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["phase"], "Scheduled");
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);

  j["status"].erase("placement");
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.phase");
  EXPECT_THAT(bad.error().message, HasSubstr("Scheduled job needs a placement"));
}

TEST(JobJson, TheSucceededMembersOfAGangRoundTripAndAreOmittedWhenNone) {
  Job job = running_job();
  job.status.placement = {{"gpu-1", {{0, 100, 80 * 1024, -1}}}, {"gpu-2", {{0, 100, 80 * 1024, -1}}}};
  job.status.succeeded_nodes = {"gpu-2"};
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["succeeded_nodes"], Json({"gpu-2"}));
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);

  job.status.succeeded_nodes.clear();
  EXPECT_FALSE(to_json(job)["status"].contains("succeeded_nodes"));
  auto none = job_from_json(to_json(job));
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_TRUE(none->status.succeeded_nodes.empty());
}

TEST(JobJson, CheckpointsAndTheNodesOfTheLatestAttemptRoundTripAndAreOmittedWhenNone) {
  EXPECT_FALSE(to_json(running_job())["status"].contains("checkpoint"));
  EXPECT_FALSE(to_json(running_job())["status"].contains("older_checkpoints"));
  EXPECT_FALSE(to_json(running_job())["status"].contains("attempt_nodes"));
  Job job = running_job();
  std::string a = "sha256:" + std::string(64, 'a'), b = "sha256:" + std::string(64, 'b');
  job.status.attempt_nodes = {"gpu-12"};
  job.status.checkpoint = CheckpointRef{a, 2048, at("2026-11-30T10:14:05Z")};
  job.status.older_checkpoints = {CheckpointRef{b, 1024, at("2026-11-30T10:04:00Z")}};
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["checkpoint"],
            Json({{"digest", a}, {"size_bytes", 2048}, {"taken_at", "2026-11-30T10:14:05Z"}, {"kind", "files"}}));
  EXPECT_EQ(j["status"]["older_checkpoints"][0]["digest"], b);
  EXPECT_EQ(j["status"]["attempt_nodes"], Json({"gpu-12"}));
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);

  j["status"]["older_checkpoints"][0]["digest"] = "sha256:XYZ";
  EXPECT_EQ(job_from_json(j).error().field, "status.older_checkpoints[0].digest");
  j = to_json(job);
  j["status"]["checkpoint"].erase("taken_at");
  EXPECT_EQ(job_from_json(j).error().field, "status.checkpoint.taken_at");
}

TEST(JobJson, ProcessCheckpointsMigrationsAndCheckpointRequestsRoundTrip) {
  Job job = running_job();
  job.status.checkpoint = CheckpointRef{"sha256:" + std::string(64, 'c'), 4096, at("2026-11-30T10:14:05Z"), "process"};
  job.status.checkpoint_requested_at = at("2026-11-30T10:14:00Z");
  job.status.migration = Migration{"gpu-7", at("2026-11-30T10:15:00Z"), "gpu-12", at("2026-11-30T10:15:01Z"), 1764497701250};
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["checkpoint"]["kind"], "process");
  EXPECT_EQ(j["status"]["migration"]["from"], "gpu-12");
  EXPECT_EQ(j["status"]["migration"]["frozen_at_ms"], 1764497701250);
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);

  j["status"]["checkpoint"]["kind"] = "memory";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.checkpoint.kind");
  j = to_json(job);
  j["status"]["migration"].erase("requested_at");
  EXPECT_EQ(job_from_json(j).error().field, "status.migration.requested_at");

  // A job holding GPUs: those chosen on the target and those it held on the source.
  job.status.migration->gpus = {{1, 100, 81920, -1}};
  job.status.migration->from_gpus = {{0, 100, 81920, -1}};
  j = to_json(job);
  EXPECT_EQ(j["status"]["migration"]["gpus"][0]["index"], 1);
  EXPECT_EQ(j["status"]["migration"]["from_gpus"][0]["index"], 0);
  back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);
  j["status"]["migration"]["gpus"][0]["blocks"] = 101;
  EXPECT_EQ(job_from_json(j).error().field, "status.migration.gpus[0].blocks");
}

TEST(JobJson, WhatAProcessCheckpointHeldOnItsGpusRoundTripsAndIsOmittedWhenNothing) {
  Job job = running_job();
  job.status.checkpoint = CheckpointRef{"sha256:" + std::string(64, 'c'), 4096, at("2026-11-30T10:14:05Z"), "process"};
  EXPECT_FALSE(to_json(job)["status"]["checkpoint"].contains("gpu_state"));
  EXPECT_FALSE(to_json(job)["status"]["checkpoint"].contains("gpus"));
  job.status.checkpoint->gpu_state = true;
  job.status.checkpoint->gpus = "simulated";
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["checkpoint"]["gpu_state"], true);
  EXPECT_EQ(j["status"]["checkpoint"]["gpus"], "simulated");
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);

  j["status"]["checkpoint"]["gpus"] = "virtual";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.checkpoint.gpus");
  EXPECT_THAT(bad.error().message, HasSubstr("\"real\", \"simulated\" or absent"));
  j["status"]["checkpoint"]["gpus"] = "real";
  j["status"]["checkpoint"]["gpu_state"] = "yes";
  EXPECT_EQ(job_from_json(j).error().field, "status.checkpoint.gpu_state");
}

TEST(JobJson, TheMemoryAJobWasMeasuredToHoldRoundTripsAndIsOmittedBeforeAnyReport) {
  Job job = running_job();
  EXPECT_FALSE(to_json(job)["status"].contains("memory_used_mib"));
  job.status.memory_used_mib = 6144;
  Json j = to_json(job);
  EXPECT_EQ(j["status"]["memory_used_mib"], 6144);
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, job);
  j["status"]["memory_used_mib"] = -1;
  EXPECT_EQ(job_from_json(j).error().field, "status.memory_used_mib");
}

TEST(JobJson, SucceededNodesMustBeAnArrayOfNodeNames) {
  Json j = to_json(running_job());
  j["status"]["succeeded_nodes"] = "gpu-1";
  EXPECT_EQ(job_from_json(j).error().field, "status.succeeded_nodes");
  j["status"]["succeeded_nodes"] = {"gpu-1", 7};
  auto number = job_from_json(j);
  ASSERT_FALSE(number);
  EXPECT_EQ(number.error().field, "status.succeeded_nodes[1]");
  EXPECT_THAT(number.error().message, HasSubstr("expected a node name"));
  j["status"]["succeeded_nodes"] = {"../gpu-1"};
  EXPECT_EQ(job_from_json(j).error().field, "status.succeeded_nodes[0]");
}

TEST(JobJson, AJobAwaitingItsReleaseNamesAtLeastOneNodeAndWhenItWasPreempted) {
  Job job = running_job();
  job.status.phase = JobPhase::kPending;
  job.status.placement.clear();
  job.status.started_at.reset();
  Json j = to_json(job);
  EXPECT_FALSE(j["status"].contains("awaiting_release")) << "omitted when none";
  j["status"]["awaiting_release"] = {{"nodes", {"gpu-1"}}, {"since", "2026-11-30T10:40:00Z"}};
  auto back = job_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  ASSERT_TRUE(back->status.awaiting_release);
  EXPECT_EQ(back->status.awaiting_release->nodes, std::vector<std::string>{"gpu-1"});
  j["status"]["awaiting_release"]["nodes"] = Json::array();
  auto none = job_from_json(j);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().field, "status.awaiting_release.nodes");
  EXPECT_THAT(none.error().message, HasSubstr("at least one"));
  j["status"]["awaiting_release"]["nodes"] = {"../gpu-1"};
  EXPECT_EQ(job_from_json(j).error().field, "status.awaiting_release.nodes[0]");
  j["status"]["awaiting_release"] = {{"nodes", {"gpu-1"}}};
  EXPECT_EQ(job_from_json(j).error().field, "status.awaiting_release.since");
  j["status"]["awaiting_release"] = {{"nodes", {"gpu-1"}}, {"since", "2026-11-30T10:40:00Z"}, {"by", "x"}};
  EXPECT_EQ(job_from_json(j).error().field, "status.awaiting_release.by");
  j["status"]["awaiting_release"] = {{"nodes", {"gpu-1"}}, {"since", "2026-11-30T10:40:00Z"}, {"released", {"ok", 3}}};
  EXPECT_EQ(job_from_json(j).error().field, "status.awaiting_release.released[1]");
  j["status"]["awaiting_release"]["released"] = {std::string(kMaxReleaseClause + 1, 'x')};
  auto long_clause = job_from_json(j);
  ASSERT_FALSE(long_clause);
  EXPECT_EQ(long_clause.error().field, "status.awaiting_release.released[0]");
  EXPECT_THAT(long_clause.error().message, HasSubstr("at most 2048 bytes"));
}

TEST(JobHostShare, ASingleNodeJobHoldsItAllAndAGangSplitsItByGpusRoundedUp) {
  JobSpec spec;
  spec.cpu_milli = 10000;
  spec.memory_mib = 1001;
  auto gpus = [](int n) {
    std::vector<GpuBinding> out;
    for (int i = 0; i < n; ++i) out.push_back({i, 100, 0, -1});
    return out;
  };
  auto share = [&](const std::vector<NodeBinding>& placement, const std::string& node) {
    HostShare s = host_share(spec, placement, node);
    return std::pair{s.cpu_milli, s.memory_mib};
  };
  EXPECT_EQ(share({{"a", gpus(1)}}, "a"), std::pair(int64_t{10000}, int64_t{1001}));
  EXPECT_EQ(share({{"a", gpus(1)}}, "b"), std::pair(int64_t{0}, int64_t{0})) << "not bound there";
  // 3 GPUs of 4 on a, 1 on b; rounded up, as the server counts a node's room.
  EXPECT_EQ(share({{"a", gpus(3)}, {"b", gpus(1)}}, "a"), std::pair(int64_t{7500}, int64_t{751}));
  EXPECT_EQ(share({{"a", gpus(3)}, {"b", gpus(1)}}, "b"), std::pair(int64_t{2500}, int64_t{251}));
  // Without GPUs, evenly.
  EXPECT_EQ(share({{"a", {}}, {"b", {}}, {"c", {}}}, "c"), std::pair(int64_t{3334}, int64_t{334}));
  spec.cpu_milli = 0;
  EXPECT_EQ(share({{"a", gpus(2)}}, "a").first, 0) << "nothing asked, nothing held";
}

TEST(JobPhaseNames, ScheduledIsAppendedSoExistingValuesKeepTheirOrder) {
  EXPECT_EQ(static_cast<int>(JobPhase::kPending), 0);
  EXPECT_EQ(static_cast<int>(JobPhase::kRunning), 1);
  EXPECT_EQ(static_cast<int>(JobPhase::kSucceeded), 2);
  EXPECT_EQ(static_cast<int>(JobPhase::kFailed), 3);
  EXPECT_EQ(static_cast<int>(JobPhase::kCancelled), 4);
  EXPECT_EQ(static_cast<int>(JobPhase::kScheduled), 5);
  for (JobPhase p : {JobPhase::kPending, JobPhase::kRunning, JobPhase::kSucceeded, JobPhase::kFailed,
                     JobPhase::kCancelled, JobPhase::kScheduled}) {
    EXPECT_EQ(parse_job_phase(to_string(p)), p);
  }
  EXPECT_FALSE(parse_job_phase("scheduled"));
  EXPECT_TRUE(is_terminal(JobPhase::kCancelled));
  EXPECT_FALSE(is_terminal(JobPhase::kScheduled));
}

TEST(JobJson, UnknownPhaseIsRefusedListingTheKnownOnes) {
  Json j = to_json(running_job());
  j["status"]["phase"] = "Exploded";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.phase");
  EXPECT_EQ(bad.error().value, "Exploded");
  EXPECT_THAT(bad.error().message, HasSubstr("Pending, Scheduled, Running, Succeeded, Failed, Cancelled"));
}

TEST(JobJson, BadEnvironmentNamesTheVariable) {
  Json j = to_json(finished_job());
  j["spec"]["env"]["1BAD"] = "x";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.env.1BAD");
  EXPECT_THAT(bad.error().message, HasSubstr("letters, digits and '_'"));

  j = to_json(finished_job());
  j["spec"]["env"]["MY-VAR"] = "x";
  EXPECT_EQ(job_from_json(j).error().field, "spec.env.MY-VAR");

  j = to_json(finished_job());
  j["spec"]["env"]["BIG"] = std::string(kMaxEnvValueBytes + 1, 'x');
  EXPECT_EQ(job_from_json(j).error().field, "spec.env.BIG");
  j["spec"]["env"]["BIG"] = std::string(kMaxEnvValueBytes, 'x');
  EXPECT_TRUE(job_from_json(j));

  j = to_json(finished_job());
  j["spec"]["env"]["NUMBER"] = 3;
  EXPECT_EQ(job_from_json(j).error().field, "spec.env.NUMBER");

  j = to_json(finished_job());
  j["spec"]["env"]["NUL"] = std::string("a\0b", 3);
  EXPECT_EQ(job_from_json(j).error().field, "spec.env.NUL");

  j = to_json(finished_job());
  j["spec"]["env"] = Json::object();
  for (size_t i = 0; i <= kMaxEnvEntries; ++i) j["spec"]["env"]["V" + std::to_string(i)] = "";
  EXPECT_EQ(job_from_json(j).error().field, "spec.env");
}

TEST(JobJson, WorkingDirMustStayInsideTheWorkspace) {
  for (std::string dir : std::vector<std::string>{"../x", "/etc", "a/../../b", "a/..", "..", std::string("a\0b", 3)}) {
    Json j = to_json(finished_job());
    j["spec"]["working_dir"] = dir;
    auto bad = job_from_json(j);
    ASSERT_FALSE(bad) << dir;
    EXPECT_EQ(bad.error().field, "spec.working_dir") << dir;
  }
  for (std::string dir : std::vector<std::string>{"", "src", "src/train/", "./src", "a..b/c", ".hidden"}) {
    Json j = to_json(finished_job());
    j["spec"]["working_dir"] = dir;
    auto ok = job_from_json(j);
    ASSERT_TRUE(ok) << dir << ": " << ok.error().to_string();
    EXPECT_EQ(ok->spec.working_dir, dir);
  }
}

TEST(JobJson, BadWorkspaceNamesTheField) {
  for (std::string digest : {"sha256:" + std::string(63, 'a'), "sha256:" + std::string(64, 'A'), std::string(64, 'a'),
                             "md5:" + std::string(64, 'a'), "sha256:" + std::string(64, 'g')}) {
    Json j = to_json(finished_job());
    j["spec"]["workspace"]["digest"] = digest;
    auto bad = job_from_json(j);
    ASSERT_FALSE(bad) << digest;
    EXPECT_EQ(bad.error().field, "spec.workspace.digest") << digest;
  }
  Json j = to_json(finished_job());
  j["spec"]["workspace"]["size_bytes"] = -1;
  EXPECT_EQ(job_from_json(j).error().field, "spec.workspace.size_bytes");
  j = to_json(finished_job());
  j["spec"]["workspace"]["url"] = "http://x";
  EXPECT_EQ(job_from_json(j).error().field, "spec.workspace.url");
  j = to_json(finished_job());
  j["spec"]["workspace"].erase("digest");
  EXPECT_EQ(job_from_json(j).error().field, "spec.workspace.digest");
}

TEST(JobJson, BadCommandArgumentNamesItsIndex) {
  Json j = to_json(finished_job());
  j["spec"]["command"][3] = std::string(kMaxCommandArgBytes + 1, 'x');
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.command[3]");
  EXPECT_THAT(bad.error().message, HasSubstr("at most 4096 bytes"));

  j = to_json(finished_job());
  j["spec"]["command"][1] = 5;
  EXPECT_EQ(job_from_json(j).error().field, "spec.command[1]");

  j = to_json(finished_job());
  j["spec"]["command"][2] = std::string("a\0b", 3);
  EXPECT_EQ(job_from_json(j).error().field, "spec.command[2]");

  j = to_json(finished_job());
  j["spec"]["command"] = Json(std::vector<std::string>(kMaxCommandArgs + 1, "x"));
  EXPECT_EQ(job_from_json(j).error().field, "spec.command");
  j["spec"]["command"] = Json(std::vector<std::string>(kMaxCommandArgs, "x"));
  EXPECT_TRUE(job_from_json(j));

  j = to_json(finished_job());
  j["spec"]["command"] = "python train.py";
  EXPECT_EQ(job_from_json(j).error().field, "spec.command");
}

TEST(JobJson, BadEventNamesItsIndexAndField) {
  Json j = to_json(finished_job());
  j["status"]["events"][0]["type"] = "Exploded";
  auto bad = job_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.events[0].type");
  EXPECT_THAT(bad.error().message,
              HasSubstr("Queued, Scheduled, Started, Preempted, Checkpointed, Resumed, Finished, Cancelled, Failed"));

  j = to_json(finished_job());
  j["status"]["events"][2].erase("type");
  EXPECT_EQ(job_from_json(j).error().field, "status.events[2].type");

  j = to_json(finished_job());
  j["status"]["events"][1].erase("time");
  EXPECT_EQ(job_from_json(j).error().field, "status.events[1].time");

  j = to_json(finished_job());
  j["status"]["events"][1]["time"] = "yesterday";
  EXPECT_EQ(job_from_json(j).error().field, "status.events[1].time");

  j = to_json(finished_job());
  j["status"]["events"][4]["who"] = "alice";
  EXPECT_EQ(job_from_json(j).error().field, "status.events[4].who");
}

TEST(JobJson, ExitCodeSignalAndAttemptsAreRangeChecked) {
  for (auto [field, value] : {std::pair{"exit_code", 256}, std::pair{"exit_code", -1}, std::pair{"signal", 0},
                              std::pair{"signal", 128}, std::pair{"attempts", -1}}) {
    Json j = to_json(finished_job());
    j["status"][field] = value;
    auto bad = job_from_json(j);
    ASSERT_FALSE(bad) << field << "=" << value;
    EXPECT_EQ(bad.error().field, std::string("status.") + field);
  }
  Json j = to_json(finished_job());
  j["status"]["cancel_requested"] = "yes";
  EXPECT_EQ(job_from_json(j).error().field, "status.cancel_requested");
  j = to_json(finished_job());
  j["status"]["node"] = "gpu-1";
  EXPECT_EQ(job_from_json(j).error().field, "status.node");
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

TEST(NodeJson, GpuCheckpointsAreSaidOnlyWhereTheAgentTakesThem) {
  Node node = h100_node();
  EXPECT_FALSE(to_json(node)["status"].contains("gpu_checkpoint"));
  node.gpu_checkpoint = true;
  EXPECT_EQ(to_json(node)["status"]["gpu_checkpoint"], true);
  auto back = node_from_json(to_json(node));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_TRUE(back->gpu_checkpoint);
}

TEST(NodeJson, TheServersAllocationFiguresInAnAnswerDecodeAndAreNotKept) {
  Json answer = to_json(h100_node());
  answer["status"]["gpus"][0]["allocated_blocks"] = 75;
  answer["status"]["gpus"][0]["allocated_vram_mib"] = 61440;
  answer["status"]["gpus"][0]["allocated_jobs"] = 2;
  answer["status"]["bound_jobs"] = 3;
  auto back = node_from_json(answer);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, h100_node());
  EXPECT_FALSE(to_json(*back)["status"]["gpus"][0].contains("allocated_blocks"));
  EXPECT_FALSE(to_json(*back)["status"].contains("bound_jobs"));
  answer["status"]["gpus"][0]["allocated_shoes"] = 1;
  EXPECT_FALSE(node_from_json(answer));  // other unknown fields are still refused
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

Node reporting_node() {
  Node node = h100_node();
  node.simulated = true;
  node.gpus[0].simulated = true;
  node.last_heartbeat = at("2026-11-30T10:00:05Z");
  node.agent_version = "0.4.0";
  node.address = "10.0.0.12:7443";
  node.conditions = {{"GpuHealthy", false, "XidError", "GPU 1 reported Xid 79", at("2026-11-30T09:59:00Z")},
                     {"DiskPressure", false, "", "", std::nullopt}};
  return node;
}

TEST(NodeJson, RoundTripsConditionsAgentFieldsAndSimulatedGpus) {
  Node node = reporting_node();
  Json j = to_json(node);
  auto back = node_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, node);
  EXPECT_EQ(j["status"]["gpus"][0]["simulated"], true);
  EXPECT_EQ(j["status"]["gpus"][1]["simulated"], false);
  EXPECT_EQ(j["status"]["agent_version"], "0.4.0");
  EXPECT_EQ(j["status"]["address"], "10.0.0.12:7443");
  EXPECT_EQ(j["status"]["conditions"][0], Json({{"type", "GpuHealthy"},
                                                {"status", false},
                                                {"reason", "XidError"},
                                                {"message", "GPU 1 reported Xid 79"},
                                                {"last_transition", "2026-11-30T09:59:00Z"}}));
  EXPECT_EQ(j["status"]["conditions"][1], Json({{"type", "DiskPressure"}, {"status", false}}));
}

TEST(NodeJson, EveryPhaseRoundTripsAndOnlyAnUncordonedReadyNodeIsSchedulable) {
  for (NodePhase phase :
       {NodePhase::kReady, NodePhase::kNotReady, NodePhase::kLost, NodePhase::kCordoned, NodePhase::kDraining}) {
    Node node = h100_node();
    node.phase = phase;
    node.unschedulable = phase == NodePhase::kCordoned || phase == NodePhase::kDraining;
    auto back = node_from_json(to_json(node));
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->phase, phase);
    EXPECT_EQ(parse_node_phase(to_string(phase)), phase);
    EXPECT_EQ(back->schedulable(), phase == NodePhase::kReady) << to_string(phase);
  }
  Node cordoned_but_ready = h100_node();
  cordoned_but_ready.unschedulable = true;
  EXPECT_FALSE(cordoned_but_ready.schedulable());
  EXPECT_EQ(to_json(h100_node())["status"]["phase"], "Ready");
}

TEST(NodeJson, ADrainThatRequeuesRoundTripsAndIsOmittedWhenOff) {
  Node node = h100_node();
  EXPECT_FALSE(to_json(node)["spec"].contains("drain_requeues"));
  node.phase = NodePhase::kDraining;
  node.unschedulable = true;
  node.drain_requeues = true;
  Json j = to_json(node);
  EXPECT_EQ(j["spec"]["drain_requeues"], true);
  auto back = node_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_TRUE(back->drain_requeues);
  j["spec"]["drain_requeues"] = "yes";
  EXPECT_EQ(node_from_json(j).error().field, "spec.drain_requeues");
}

TEST(NodeJson, OldDownPhaseIsRefusedListingTheKnownOnes) {
  Json j = to_json(h100_node());
  j["status"]["phase"] = "Down";
  auto bad = node_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "status.phase");
  EXPECT_EQ(bad.error().value, "Down");
  EXPECT_THAT(bad.error().message, HasSubstr("Ready, NotReady, Lost, Cordoned, Draining"));
}

TEST(NodeJson, BadConditionsNameTheirIndex) {
  Json j = to_json(reporting_node());
  j["status"]["conditions"][1]["type"] = "disk pressure";
  EXPECT_EQ(node_from_json(j).error().field, "status.conditions[1].type");

  j = to_json(reporting_node());
  j["status"]["conditions"][1]["type"] = "GpuHealthy";
  auto dup = node_from_json(j);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().field, "status.conditions[1].type");
  EXPECT_THAT(dup.error().message, HasSubstr("repeats status.conditions[0]"));

  j = to_json(reporting_node());
  j["status"]["conditions"][0].erase("status");
  EXPECT_EQ(node_from_json(j).error().field, "status.conditions[0].status");

  j = to_json(reporting_node());
  j["status"]["conditions"][0]["status"] = "True";
  EXPECT_EQ(node_from_json(j).error().field, "status.conditions[0].status");

  j = to_json(reporting_node());
  j["status"]["conditions"][0]["last_transition"] = "soon";
  EXPECT_EQ(node_from_json(j).error().field, "status.conditions[0].last_transition");

  j = to_json(reporting_node());
  j["status"]["conditions"][0]["severity"] = "high";
  EXPECT_EQ(node_from_json(j).error().field, "status.conditions[0].severity");
}

TEST(NodeJson, UnknownFieldsAreRefusedEverywhere) {
  Json j = to_json(reporting_node());
  j["status"]["gpus"][0]["temperature"] = 60;
  EXPECT_EQ(node_from_json(j).error().field, "status.gpus[0].temperature");
  j = to_json(reporting_node());
  j["status"]["hostname"] = "x";
  EXPECT_EQ(node_from_json(j).error().field, "status.hostname");
  j = to_json(reporting_node());
  j["spec"]["cordoned"] = true;
  EXPECT_EQ(node_from_json(j).error().field, "spec.cordoned");
}

TEST(NodeJson, JsonWrittenBeforeTheControlPlaneFieldsStillDecodes) {
  Json old = Json::parse(R"({
    "kind": "Node",
    "metadata": {"name": "gpu-12"},
    "spec": {"unschedulable": false},
    "status": {"phase": "Draining", "cpu_milli": 96000, "memory_mib": 1048576, "simulated": false,
               "gpus": [{"index": 0, "uuid": "GPU-0", "model": "h100", "memory_mib": 81920,
                         "healthy": true, "mig_enabled": false}]}
  })");
  auto node = node_from_json(old);
  ASSERT_TRUE(node) << node.error().to_string();
  EXPECT_EQ(node->phase, NodePhase::kDraining);
  EXPECT_FALSE(node->gpus[0].simulated);
  EXPECT_TRUE(node->conditions.empty());
  EXPECT_EQ(node->agent_version, "");
  EXPECT_EQ(node->address, "");
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

TEST(ProjectJson, RoundTripsADescriptionAndDecodesOldJsonWithoutOne) {
  Project p{{"vision", "", {}, 0}, 2.0, {{"alice", 3.0}}, "Computer vision research"};
  Json j = to_json(p);
  EXPECT_EQ(j["spec"]["description"], "Computer vision research");
  auto back = project_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, p);

  auto old = project_from_json(Json::parse(R"({"kind":"Project","metadata":{"name":"nlp"},"spec":{"share":1}})"));
  ASSERT_TRUE(old) << old.error().to_string();
  EXPECT_EQ(old->description, "");

  j["spec"]["description"] = std::string(kMaxDescriptionBytes + 1, 'x');
  EXPECT_EQ(project_from_json(j).error().field, "spec.description");
  j["spec"]["description"] = 5;
  EXPECT_EQ(project_from_json(j).error().field, "spec.description");
  j = to_json(p);
  j["spec"]["owner"] = "alice";
  EXPECT_EQ(project_from_json(j).error().field, "spec.owner");
}

}  // namespace
}  // namespace cnlab::model

namespace cnlab::model {
namespace {

TEST(SimulatedNode, HasOneSimulatedGpuPerIndexWithTheCatalogsMemoryAndDecodesBack) {
  ModelId h100 = *find_model("h100");
  Node node = simulated_node("gpu-3", h100, 4, 32000, 256 * 1024);
  ASSERT_EQ(node.gpus.size(), 4u);
  EXPECT_TRUE(node.simulated);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(node.gpus[i].index, i);
    EXPECT_TRUE(node.gpus[i].simulated);
    EXPECT_EQ(node.gpus[i].memory_mib, gpu_model(h100).memory_mib);
    EXPECT_EQ(node.gpus[i].uuid, "GPU-gpu-3-" + std::to_string(i));
  }
  EXPECT_TRUE(validate(node));
  auto back = node_from_json(to_json(node));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, node);
}

}  // namespace
}  // namespace cnlab::model
