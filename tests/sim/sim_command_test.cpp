#include "sim/sim_command.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "run_cli.h"
#include "temp_dir.h"

namespace cnlab::sim {
namespace {

using ::testing::HasSubstr;

using testing::Outcome;
using testing::run_cli;
using testing::write;

class SimCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    write(dir_.file("nodes.csv"), "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,64000,131072,4,V100\n");
    std::string pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    for (int i = 0; i < 20; ++i) {
      pods += fmt::format("p{},2000,1024,{}\n", i, i % 4 == 0 ? "0,0" : i % 3 == 0 ? "1,1000" : "1,300");
    }
    write(dir_.file("tiny.csv"), pods);
  }
  std::vector<std::string> base() const {
    return {"sim",   "alloc",         "--nodes", dir_.file("nodes.csv"), "--pods", dir_.file("tiny.csv"),
            "--out", dir_.file("out")};
  }
  test_support::TempDir dir_;
};

TEST_F(SimCommand, WritesTheCurvesChartAndSummary) {
  auto args = base();
  args.insert(args.end(), {"--seeds", "1-3", "--threads", "2", "--policies", "bestfit,FGD"});
  Outcome out = run_cli(args);
  EXPECT_EQ(out.code, 0) << out.err;
  for (const char* f : {"allocation_curves.csv", "allocation.svg", "summary.md"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "out" / f)) << f;
  }
  std::ifstream csv(dir_.file("out/allocation_curves.csv"));
  std::stringstream text;
  text << csv.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\ntiny,BestFit,3,"));
  EXPECT_THAT(text.str(), HasSubstr("\ntiny,FGD,3,"));
}

// "V100" is a name the baselines take as is; the CNLab policy needs catalog models (v100m16 or
// v100m32) and says so before anything runs, instead of stopping half-way.
TEST_F(SimCommand, AModelOutsideTheCatalogIsRefusedForCnlabOnly) {
  auto args = base();
  args.insert(args.end(), {"--seeds", "1", "--policies", "fgd,cnlab"});
  Outcome out = run_cli(args);
  EXPECT_EQ(out.code, 2);
  EXPECT_THAT(out.err, HasSubstr("node n1: model \"V100\": not in the GPU catalog"));
  EXPECT_THAT(out.err, HasSubstr("v100m32"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "out" / "summary.md"));

  auto baselines = base();
  baselines.insert(baselines.end(), {"--seeds", "1", "--policies", "fgd"});
  EXPECT_EQ(run_cli(baselines).code, 0);
}

TEST_F(SimCommand, BadSeedsExitWithTwoAndSayWhatIsAllowed) {
  auto args = base();
  args.insert(args.end(), {"--seeds", "9-3"});
  Outcome out = run_cli(args);
  EXPECT_EQ(out.code, 2);
  EXPECT_THAT(out.err, HasSubstr("--seeds \"9-3\""));
  EXPECT_THAT(out.err, HasSubstr("expected A-B"));
}

TEST_F(SimCommand, UnknownPolicyListsTheValidOnes) {
  auto args = base();
  args.insert(args.end(), {"--policies", "bestfit,tetris"});
  Outcome out = run_cli(args);
  EXPECT_EQ(out.code, 2);
  EXPECT_THAT(out.err, HasSubstr("--policies \"tetris\""));
  EXPECT_THAT(out.err, HasSubstr("random,dotprod,gpuclustering,gpupacking,bestfit,fgd"));
}

TEST_F(SimCommand, MissingAndMalformedFilesNameTheFile) {
  Outcome missing = run_cli(
      {"sim", "alloc", "--nodes", dir_.file("nope.csv"), "--pods", dir_.file("tiny.csv"), "--out", dir_.file("out")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr(dir_.file("nope.csv")));
  write(dir_.file("bad.csv"), "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,2000\n");
  Outcome bad = run_cli(
      {"sim", "alloc", "--nodes", dir_.file("nodes.csv"), "--pods", dir_.file("bad.csv"), "--out", dir_.file("out")});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr(dir_.file("bad.csv") + ":2:gpu_milli \"2000\""));
}

TEST_F(SimCommand, MissingRequiredFlagsUnknownFlagsAndBadThreadsExitWithTwo) {
  EXPECT_THAT(run_cli({"sim", "alloc", "--pods", dir_.file("tiny.csv"), "--out", dir_.file("o")}).err,
              HasSubstr("--nodes"));
  EXPECT_EQ(run_cli({"sim", "alloc", "--pods", dir_.file("tiny.csv"), "--out", dir_.file("o")}).code, 2);
  auto args = base();
  args.push_back("--colour");
  Outcome unknown = run_cli(args);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--colour"));
  args = base();
  args.insert(args.end(), {"--threads", "zero"});
  Outcome threads = run_cli(args);
  EXPECT_EQ(threads.code, 2);
  EXPECT_THAT(threads.err, HasSubstr("--threads \"zero\": must be a whole number 1..256"));
  args = base();
  args.push_back("--nodes");
  EXPECT_EQ(run_cli(args).code, 2);
  Outcome bare = run_cli({"sim"});
  EXPECT_EQ(bare.code, 2);
  EXPECT_THAT(bare.err, HasSubstr("alloc"));
  Outcome unknown_command = run_cli({"sim", "bogus"});
  EXPECT_EQ(unknown_command.code, 2);
  EXPECT_THAT(unknown_command.err, HasSubstr("unknown command \"bogus\"; valid: alloc"));
}

TEST(SeedList, AcceptsRangesAndListsAndRejectsTheRest) {
  EXPECT_EQ(*parse_seed_list("42-51", "--seeds"), (std::vector<uint64_t>{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}));
  EXPECT_EQ(*parse_seed_list("1,5, 7-8,5", "--seeds"), (std::vector<uint64_t>{1, 5, 7, 8}));
  EXPECT_EQ(*parse_seed_list("0", "--seeds"), std::vector<uint64_t>{0});
  for (const char* bad : {"", "a-b", "5-1", "-3", "1,,2", "0-99999999"}) {
    auto r = parse_seed_list(bad, "--seeds");
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().field, "--seeds");
    }
  }
}

}  // namespace
}  // namespace cnlab::sim
