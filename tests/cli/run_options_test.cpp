// `cnlab run`'s pure helpers: flags to the Job body, sizes and deadlines as people write them,
// the exit code a finished job stands for, the summary line, and which artifact paths are safe.
#include <gmock/gmock.h>

#include "cli/artifact_download.h"
#include "cli/run_options.h"

namespace cnlab::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Time at(const char* text) { return *parse_rfc3339(text, "t"); }

TEST(ByteSize, BinaryDecimalAndPlainBytes) {
  EXPECT_EQ(*parse_byte_size("1Gi", "f"), int64_t{1} << 30);
  EXPECT_EQ(*parse_byte_size("512mib", "f"), int64_t{512} << 20);
  EXPECT_EQ(*parse_byte_size("64Ki", "f"), 64 * 1024);
  EXPECT_EQ(*parse_byte_size("2G", "f"), 2'000'000'000);
  EXPECT_EQ(*parse_byte_size("4096", "f"), 4096);
}

TEST(ByteSize, NonsenseAndZeroAreRefusedNamingTheFlag) {
  auto bad = parse_byte_size("lots", "--max-workspace");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "--max-workspace");
  EXPECT_THAT(bad.error().message, HasSubstr("1Gi"));
  EXPECT_FALSE(parse_byte_size("0Mi", "f"));
  EXPECT_FALSE(parse_byte_size("3Qi", "f"));
}

TEST(CpuMilli, CoresOrMillicoresAsKubernetesWritesThem) {
  EXPECT_EQ(*parse_cpu_milli("4", "--cpu"), 4000);
  EXPECT_EQ(*parse_cpu_milli("0.5", "--cpu"), 500);
  EXPECT_EQ(*parse_cpu_milli("2.25", "--cpu"), 2250);
  EXPECT_EQ(*parse_cpu_milli("1.001", "--cpu"), 1001);
  EXPECT_EQ(*parse_cpu_milli("250m", "--cpu"), 250);
  EXPECT_EQ(*parse_cpu_milli(" 8 ", "--cpu"), 8000);
  for (const char* bad : {"", "0", "0m", "0.0", "-1", "1.0005", "four", "1.", ".5", "2c", "m", "1e3", "9999999999999"}) {
    auto refused = parse_cpu_milli(bad, "--cpu");
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().field, "--cpu") << bad;
    EXPECT_EQ(refused.error().value, bad) << bad;
  }
  EXPECT_THAT(parse_cpu_milli("1.0005", "--cpu").error().message, HasSubstr("finer than a millicore"));
}

TEST(JobBody, MemoryIsAskedInWholeMiBAndBadHostFlagsAreNamed) {
  Time now = at("2026-12-01T10:00:00Z");
  auto rounded = job_body({.command = {"x"}, .gpu = "none", .memory = "1G"}, nullptr, now);
  ASSERT_TRUE(rounded);
  EXPECT_EQ((*rounded)["spec"]["memory_mib"], 954) << "10^9 bytes is 953.7 MiB, asked as 954";
  auto memory = job_body({.command = {"x"}, .gpu = "none", .memory = "lots"}, nullptr, now);
  ASSERT_FALSE(memory);
  EXPECT_EQ(memory.error().field, "--memory");
  auto cpu = job_body({.command = {"x"}, .gpu = "none", .cpu = "-2"}, nullptr, now);
  ASSERT_FALSE(cpu);
  EXPECT_EQ(cpu.error().field, "--cpu");
}

TEST(Deadline, ADurationCountsFromNow) {
  EXPECT_EQ(*parse_deadline("2h", at("2026-12-01T10:00:00Z")), at("2026-12-01T12:00:00Z"));
}

TEST(Deadline, ATimeMayLeaveOutSecondsAndCarryAnOffset) {
  Time now = at("2026-11-01T00:00:00Z");
  EXPECT_EQ(*parse_deadline("2026-12-01T18:00Z", now), at("2026-12-01T18:00:00Z"));
  EXPECT_EQ(*parse_deadline("2026-12-01T18:00:30+01:00", now), at("2026-12-01T17:00:30Z"));
}

TEST(Deadline, APastTimeOrGarbageIsRefused) {
  Time now = at("2026-12-01T10:00:00Z");
  auto past = parse_deadline("2026-12-01T09:00Z", now);
  ASSERT_FALSE(past);
  EXPECT_THAT(past.error().message, HasSubstr("has passed"));
  auto garbage = parse_deadline("tomorrow", now);
  ASSERT_FALSE(garbage);
  EXPECT_EQ(garbage.error().field, "--deadline");
}

TEST(JobCommand, APythonScriptRunsWithPython3AndAnythingElseAsGiven) {
  EXPECT_THAT(job_command({"train.py", "--epochs", "3"}), ElementsAre("python3", "train.py", "--epochs", "3"));
  EXPECT_THAT(job_command({"sh", "-c", "echo hi"}), ElementsAre("sh", "-c", "echo hi"));
}

TEST(JobName, ComesFromTheScriptMadeAValidName) {
  EXPECT_EQ(job_name({.command = {"src/Train_v2.py"}}), "train-v2");
  EXPECT_EQ(job_name({.command = {"./__.py"}}), "");
  EXPECT_EQ(job_name({.command = {"train.py"}, .name = "mine"}), "mine");
}

TEST(JobBody, CarriesEveryFlag) {
  RunFlags flags{.command = {"train.py", "--lr", "0.1"},
                 .gpu = "h100-25",
                 .project = "vision",
                 .priority_class = "production",
                 .deadline = "2h",
                 .estimate = "45m",
                 .env = {"SEED=1", "EMPTY="},
                 .checkpointable = true,
                 .cpu = "2.5",
                 .memory = "1536Mi"};
  WorkspaceRef workspace{"sha256:abc", 161};
  auto body = job_body(flags, &workspace, at("2026-12-01T10:00:00Z"));
  ASSERT_TRUE(body) << body.error().to_string();
  const Json& spec = (*body)["spec"];
  EXPECT_EQ(spec["gpu"], "h100-25");
  EXPECT_EQ(spec["project"], "vision");
  EXPECT_EQ(spec["priority_class"], "production");
  EXPECT_EQ(spec["deadline"], "2026-12-01T12:00:00Z");
  EXPECT_EQ(spec["estimated_duration"], "45m");
  EXPECT_EQ(spec["env"], Json({{"SEED", "1"}, {"EMPTY", ""}}));
  EXPECT_EQ(spec["checkpointable"], true);
  EXPECT_EQ(spec["cpu_milli"], 2500);
  EXPECT_EQ(spec["memory_mib"], 1536);
  EXPECT_EQ(spec["command"], Json({"python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(spec["workspace"], Json({{"digest", "sha256:abc"}, {"size_bytes", 161}}));
  EXPECT_EQ((*body)["metadata"]["name"], "train");
}

TEST(JobBody, LeavesOutWhatWasNotAskedFor) {
  auto body = job_body({.command = {"nvidia-smi"}, .gpu = "none"}, nullptr, at("2026-12-01T10:00:00Z"));
  ASSERT_TRUE(body);
  EXPECT_EQ((*body)["spec"], Json({{"gpu", "none"}, {"command", {"nvidia-smi"}}}));
}

TEST(JobBody, ABadEnvOrMissingGpuNamesTheFlag) {
  Time now = at("2026-12-01T10:00:00Z");
  auto env = job_body({.command = {"x"}, .gpu = "none", .env = {"NOEQUALS"}}, nullptr, now);
  ASSERT_FALSE(env);
  EXPECT_EQ(env.error().field, "--env");
  auto gpu = job_body({.command = {"x"}}, nullptr, now);
  ASSERT_FALSE(gpu);
  EXPECT_EQ(gpu.error().field, "--gpu");
  auto estimate = job_body({.command = {"x"}, .gpu = "none", .estimate = "soon"}, nullptr, now);
  ASSERT_FALSE(estimate);
  EXPECT_EQ(estimate.error().field, "--estimate");
}

TEST(ExitCode, TheJobsOwnCodeOrSignalOr125WhenItNeverRan) {
  EXPECT_EQ(exit_code_for_job({{"phase", "Succeeded"}, {"exit_code", 0}, {"attempts", 1}}, false), 0);
  EXPECT_EQ(exit_code_for_job({{"phase", "Failed"}, {"exit_code", 3}, {"attempts", 1}}, false), 3);
  EXPECT_EQ(exit_code_for_job({{"phase", "Failed"}, {"signal", 9}, {"attempts", 1}}, false), 137);
  EXPECT_EQ(exit_code_for_job({{"phase", "Cancelled"}, {"signal", 15}, {"attempts", 1}}, true), 130);
  EXPECT_EQ(exit_code_for_job({{"phase", "Cancelled"}, {"signal", 15}, {"attempts", 1}}, false), 143);
  EXPECT_EQ(exit_code_for_job({{"phase", "Cancelled"}, {"attempts", 0}}, false), 125);
  EXPECT_EQ(exit_code_for_job({{"phase", "Failed"}, {"attempts", 0}, {"message", "workspace missing"}}, false), 125);
}

TEST(Summary, NamesTheSliceNodeWallAndGpuTime) {
  Json job = {{"metadata", {{"name", "train-6f3ae726"}}},
              {"status",
               {{"phase", "Succeeded"},
                {"attempts", 1},
                {"exit_code", 0},
                {"started_at", "2026-12-01T10:00:00Z"},
                {"finished_at", "2026-12-01T10:00:12Z"},
                {"placement", {{{"node", "dev"}, {"gpus", {{{"index", 0}, {"blocks", 25}}}}}}}}}};
  EXPECT_EQ(wall_seconds(job["status"]), 12);
  EXPECT_DOUBLE_EQ(gpu_seconds(job["status"], 12), 3);
  std::string line = summary_line(job, [](const std::string& node, int index) {
    return node == "dev" && index == 0 ? "h100" : "";
  });
  EXPECT_EQ(line, "job train-6f3ae726 Succeeded in 12.0s on node dev (h100 gpu0, 25 blocks) — GPU time 3.0s (25 blocks × 12.0s)");
}

TEST(Summary, AFailureGivesItsCodeAndMessage) {
  Json job = {{"metadata", {{"name", "x-1"}}},
              {"status", {{"phase", "Failed"}, {"attempts", 1}, {"exit_code", 3}, {"message", "ValueError: bad"}}}};
  EXPECT_THAT(summary_line(job, nullptr), HasSubstr("Failed (exit code 3); ValueError: bad"));
}

TEST(ArtifactPath, OnlyRelativePathsWithoutDotSegmentsAreWritten) {
  EXPECT_TRUE(safe_artifact_path("results/metrics.csv"));
  EXPECT_FALSE(safe_artifact_path("/etc/passwd"));
  EXPECT_FALSE(safe_artifact_path("a/../../b"));
  EXPECT_FALSE(safe_artifact_path(".."));
  EXPECT_FALSE(safe_artifact_path("a//b"));
  EXPECT_FALSE(safe_artifact_path("a/./b"));
  EXPECT_FALSE(safe_artifact_path("a\\b"));
  EXPECT_FALSE(safe_artifact_path(""));
}

// `cnlab run train.py --gpu h100-25 --epochs 3`: cnlab's flags after the script are cnlab's.
class TrailingFlags : public ::testing::Test {
 protected:
  Result<std::vector<std::string>> take(const std::vector<std::string>& words) {
    return take_trailing_flags(words, {{"--gpu", [this](const std::string& v) { gpu = v; }},
                                       {"--env", [this](const std::string& v) { env.push_back(v); }}},
                               {{"--detach", [this] { detach = true; }}});
  }
  std::string gpu;
  std::vector<std::string> env;
  bool detach = false;
};

TEST_F(TrailingFlags, CnlabsFlagsAfterTheScriptAreTakenAndTheRestIsTheJobs) {
  auto command = take({"train.py", "--gpu", "h100-25", "--epochs", "3", "--env=A=1", "--detach", "-v"});
  ASSERT_TRUE(command);
  EXPECT_EQ(*command, (std::vector<std::string>{"train.py", "--epochs", "3", "-v"}));
  EXPECT_EQ(gpu, "h100-25");
  EXPECT_EQ(env, std::vector<std::string>{"A=1"});
  EXPECT_TRUE(detach);
}

TEST_F(TrailingFlags, AfterADoubleDashEverythingIsTheJobsEvenCnlabsFlagNames) {
  auto command = take({"train.py", "--gpu", "l4-50", "--", "--gpu", "ignored-by-cnlab", "--detach"});
  ASSERT_TRUE(command);
  EXPECT_EQ(*command, (std::vector<std::string>{"train.py", "--gpu", "ignored-by-cnlab", "--detach"}));
  EXPECT_EQ(gpu, "l4-50");
  EXPECT_FALSE(detach);
}

TEST_F(TrailingFlags, ALeadingDoubleDashMakesEveryWordTheJobs) {
  auto command = take({"--", "ls", "--gpu", "x", "--detach"});
  ASSERT_TRUE(command);
  EXPECT_EQ(*command, (std::vector<std::string>{"ls", "--gpu", "x", "--detach"}));
  EXPECT_EQ(gpu, "");
  EXPECT_FALSE(detach);
}

TEST_F(TrailingFlags, AValueFlagAtTheEndWithoutItsValueIsNamed) {
  auto command = take({"train.py", "--gpu"});
  ASSERT_FALSE(command);
  EXPECT_EQ(command.error().field, "--gpu");
}

}  // namespace
}  // namespace cnlab::cli
