#include "sim/replay_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "sim/sim_command.h"
#include "run_cli.h"
#include "temp_dir.h"

namespace cnlab::sim {
namespace {

using ::testing::HasSubstr;

using testing::Outcome;
using testing::write;

// Parses `args` as `cnlab sim replay ...` would.
Outcome run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), {"sim", "replay"});
  return testing::run_cli(std::move(args));
}


std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ReplayCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    write(dir_.file("jobs.csv"),
          "submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n"
          "0,1000,1,0.5,,vision,dev,\n"
          "20,100,1,0.5,,nlp,dev,\n"
          "30,300,1,,,nlp,inference,1000\n"
          "40,60,2,,h100,vision,opportunistic,\n");
    write(dir_.file("nodes.csv"), "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,64000,131072,4,V100M32\n");
    write(dir_.file("pods.csv"),
          "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
          "p0,4000,1024,1,500,,LS,Running,0,500,0\n"
          "p1,4000,1024,1,1000,,BE,Running,10,900,12\n"
          "p2,0,0,0,0,,Guaranteed,Pending,20,40,\n");
  }
  std::string out_dir() const { return dir_.file("out"); }
  test_support::TempDir dir_;
};

TEST_F(ReplayCommand, GenericTraceOnAClusterSpecWritesSummaryCsvsAndChart) {
  Outcome o = run_cli({"--trace", dir_.file("jobs.csv"), "--cluster", "1:h100x2", "--out", out_dir()});
  ASSERT_EQ(o.code, 0) << o.err;
  std::string summary = read(dir_.file("out/summary.md"));
  for (const char* text : {"| | fifo | cnlab |", "queueing delay p50", "queueing delay p99", "completion time p50",
                           "completion time p99", "deadline hit rate", "Jain's index", "| inference | 1 |",
                           "| vision | 2 |", "could have been powered down",
                           "Scheduler: defaults; the order of a user's waiting jobs per tier: inference submitted, "
                           "production submitted, dev response_ratio, opportunistic submitted"}) {
    EXPECT_THAT(summary, HasSubstr(text));
  }
  EXPECT_THAT(o.out, HasSubstr("seconds per policy: fifo"));
  std::string series = read(dir_.file("out/timeseries.csv"));
  EXPECT_EQ(series.rfind("time,policy,allocation_pct,utilization_pct,pending,running,nodes_on\n0,fifo,", 0), 0u);
  EXPECT_THAT(series, HasSubstr(",cnlab,"));
  std::string jobs = read(dir_.file("out/jobs.csv"));
  // fifo: line-2 and line-3 take a whole GPU each; the inference job waits for line-3 to end at
  // 120 and meets its deadline.
  EXPECT_THAT(jobs, HasSubstr("fifo,line-3,dev,nlp,any-50,20,20,120,0,100,100,0,0,,\n"));
  EXPECT_THAT(jobs, HasSubstr("fifo,line-4,inference,nlp,any,30,120,420,90,390,300,0,0,1000,yes\n"));
  EXPECT_THAT(jobs, HasSubstr("\ncnlab,line-4,inference,nlp,any,30,"));
  EXPECT_EQ(read(dir_.file("out/replay.svg")).rfind("<svg", 0), 0u);
}

TEST_F(ReplayCommand, OpenbPodsOnAnOpenbNodeListWithOnePolicy) {
  Outcome o = run_cli({"--trace", dir_.file("pods.csv"), "--nodes", dir_.file("nodes.csv"), "--policies", "CNLab",
                       "--out", out_dir(), "--cycle-interval", "1s", "--sample-every", "1m"});
  ASSERT_EQ(o.code, 0) << o.err;
  std::string summary = read(dir_.file("out/summary.md"));
  EXPECT_THAT(summary, HasSubstr("| | cnlab |"));
  EXPECT_THAT(summary, HasSubstr("Jain's index is 1 by construction"));
  EXPECT_THAT(summary, HasSubstr("| production | 1 |"));
}

TEST_F(ReplayCommand, BadClusterSpecsExitWithTwoAndSayWhatIsAllowed) {
  for (const char* spec : {"h100x8", "0:h100x8", "3:h900x8", "3:h100x0", "3:h100", "abc"}) {
    Outcome o = run_cli({"--trace", dir_.file("jobs.csv"), "--cluster", spec, "--out", out_dir()});
    EXPECT_EQ(o.code, 2) << spec;
    EXPECT_THAT(o.err, HasSubstr("cnlab sim replay: --cluster")) << spec;
    EXPECT_THAT(o.err, HasSubstr("COUNT:MODELxGPUS")) << spec;
  }
}

TEST_F(ReplayCommand, ClusterFlagsAreCheckedBeforeAnythingRuns) {
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--trace", dir_.file("jobs.csv"), "--out", out_dir()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Outcome neither = run_cli(args({}));
  EXPECT_EQ(neither.code, 2);
  EXPECT_THAT(neither.err, HasSubstr("give exactly one"));
  Outcome both = run_cli(args({"--nodes", dir_.file("nodes.csv"), "--cluster", "1:h100x1"}));
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("give exactly one"));
  Outcome host = run_cli(args({"--nodes", dir_.file("nodes.csv"), "--cpu-per-gpu", "8"}));
  EXPECT_EQ(host.code, 2);
  EXPECT_THAT(host.err, HasSubstr("only with --cluster"));
  Outcome cores = run_cli(args({"--cluster", "1:h100x1", "--cpu-per-gpu", "-1"}));
  EXPECT_EQ(cores.code, 2);
  EXPECT_THAT(cores.err, HasSubstr("--cpu-per-gpu \"-1\""));
  Outcome memory = run_cli(args({"--cluster", "1:h100x1", "--memory-per-gpu", "12 parsecs"}));
  EXPECT_EQ(memory.code, 2);
  EXPECT_THAT(memory.err, HasSubstr("--memory-per-gpu"));
}

TEST_F(ReplayCommand, BadFlagsExitWithTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--policies", "fifo,sjf"}, "--policies \"sjf\": unknown replay policy; valid: fifo,cnlab"},
           {{"--cycle-interval", "0s"}, "--cycle-interval \"0s\": must be at least 1s"},
           {{"--sample-every", "soon"}, "--sample-every \"soon\": expected a duration"},
           {{"--checkpoint-every", "1h", "--checkpoint-every", "2h"}, "may be given once"},
           {{"--checkpointable", "batch"}, "--checkpointable \"batch\""},
           {{"--power-down-after", "-5m"}, "--power-down-after"},
           {{"--bogus"}, "argument \"--bogus\": unknown"},
       }) {
    std::vector<std::string> a = {"--trace", dir_.file("jobs.csv"), "--cluster", "1:h100x1", "--out", out_dir()};
    a.insert(a.end(), c.extra.begin(), c.extra.end());
    Outcome o = run_cli(a);
    EXPECT_EQ(o.code, 2) << c.says;
    EXPECT_THAT(o.err, HasSubstr(c.says));
  }
  Outcome no_trace = run_cli({"--cluster", "1:h100x1", "--out", out_dir()});
  EXPECT_EQ(no_trace.code, 2);
  EXPECT_THAT(no_trace.err, HasSubstr("--trace"));
  Outcome no_out = run_cli({"--trace", dir_.file("jobs.csv"), "--cluster", "1:h100x1"});
  EXPECT_EQ(no_out.code, 2);
  EXPECT_THAT(no_out.err, HasSubstr("--out"));
}

TEST_F(ReplayCommand, BadTracesExitWithTwoNamingFileAndLine) {
  write(dir_.file("model.csv"), "submit_time,duration,num_gpus,model\n0,10,1,h100\n5,10,1,h900\n");
  Outcome model = run_cli({"--trace", dir_.file("model.csv"), "--cluster", "1:h100x1", "--out", out_dir()});
  EXPECT_EQ(model.code, 2);
  EXPECT_THAT(model.err, HasSubstr("model.csv:3: model \"h900\": unknown GPU model"));

  write(dir_.file("untimed.csv"), "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,0,1,1000\n");
  Outcome untimed = run_cli({"--trace", dir_.file("untimed.csv"), "--cluster", "1:h100x1", "--out", out_dir()});
  EXPECT_EQ(untimed.code, 2);
  EXPECT_THAT(untimed.err, HasSubstr("no creation_time and deletion_time columns"));

  Outcome missing = run_cli({"--trace", dir_.file("nope.csv"), "--cluster", "1:h100x1", "--out", out_dir()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("nope.csv"));

  write(dir_.file("badnodes.csv"), "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,Z80\n");
  Outcome nodes = run_cli({"--trace", dir_.file("jobs.csv"), "--nodes", dir_.file("badnodes.csv"), "--out", out_dir()});
  EXPECT_EQ(nodes.code, 2);
  EXPECT_THAT(nodes.err, HasSubstr("node n0: model \"Z80\""));
}

TEST_F(ReplayCommand, SimListsReplayBesideAlloc) {
  CLI::App app{"cnlab"};
  add_sim_commands(app);
  std::vector<std::string> argv_text = {"cnlab", "sim", "nonsense"};
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  int code = 0;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    code = e.get_exit_code();
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_THAT(err, HasSubstr("valid: alloc, replay"));
}

}  // namespace
}  // namespace cnlab::sim
