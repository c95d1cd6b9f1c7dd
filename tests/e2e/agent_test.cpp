// The agent end to end: a real server, real agents on simulated GPUs, real processes in cgroups and
// namespaces (where the machine allows them), as a user would see them through the API.
#include <gmock/gmock.h>

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>

#include "agent/files/files.h"
#include "agent_cluster.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

class AgentTest : public AgentCluster {
 protected:
  void SetUp() override { start_cluster({"--not-ready-after", "2s", "--lost-after", "4s"}); }
};

TEST_F(AgentTest, TheNodeAppearsWithItsSimulatedGpusAndTheAgentServesMetrics) {
  AgentProcess& agent = add_agent("gpu-1", "h100x2,l4");
  Json node = call(*admin_, "GET", "/v1/nodes/gpu-1", 200);
  ASSERT_EQ(node["status"]["gpus"].size(), 3u);
  EXPECT_EQ(node["status"]["gpus"][2]["model"], "l4");
  EXPECT_EQ(node["status"]["gpus"][0]["uuid"], "GPU-gpu-1-0");
  EXPECT_TRUE(node["status"]["simulated"].get<bool>());
  EXPECT_TRUE(node["status"]["gpus"][0]["simulated"].get<bool>());

  auto metrics = net::Client::connect({agent.metrics_url(), "", ""});
  ASSERT_TRUE(metrics);
  auto scraped = (*metrics)->request("GET", "/metrics");
  ASSERT_TRUE(scraped);
  EXPECT_THAT(scraped->body, HasSubstr("cnlab_agent_gpu_info{gpu=\"2\",uuid=\"GPU-gpu-1-2\",model=\"l4\",simulated=\"true\"} 1"));
  EXPECT_THAT(scraped->body, HasSubstr("cnlab_agent_jobs_running 0"));
}

TEST_F(AgentTest, AJobPrintsWritesArtifactsAndSucceeds) {
  add_agent("gpu-1");
  std::string id = submit({"python3", "-c",
                           "import os, sys\n"
                           "print('job', os.environ['CNLAB_JOB_ID'], 'gpus', os.environ['CUDA_VISIBLE_DEVICES'])\n"
                           "print('to stderr', file=sys.stderr)\n"
                           "d = os.environ['CNLAB_ARTIFACTS_DIR']\n"
                           "os.makedirs(d + '/results')\n"
                           "open(d + '/results/metrics.csv', 'w').write('loss,acc\\n0.31,0.92\\n')\n"
                           "print('done')"});
  Json job = wait_for_end(id);
  ASSERT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  EXPECT_EQ(job["status"]["exit_code"], 0);
  int gpu = job["status"]["placement"][0]["gpus"][0]["index"];
  // Each stream in order; across the two pipes, order is only as the shim happened to read them.
  std::vector<std::string> out, err;
  for (const auto& line : logs(id)) (line["stream"] == "stderr" ? err : out).push_back(line["text"]);
  EXPECT_THAT(out, ElementsAre("job " + id + " gpus " + std::to_string(gpu), "done"));
  EXPECT_THAT(err, ElementsAre("to stderr"));
  Json artifacts = call(*admin_, "GET", "/v1/jobs/" + id + "/artifacts", 200);
  ASSERT_EQ(artifacts["items"].size(), 1u);
  EXPECT_EQ(artifacts["items"][0]["path"], "results/metrics.csv");
  auto file = admin_->request("GET", "/v1/jobs/" + id + "/artifacts/results/metrics.csv");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->body, "loss,acc\n0.31,0.92\n");
  // The job's files are removed from the node once it has been reported.
  EXPECT_TRUE(eventually([&] { return !fs::exists(nodes_.path() + "/agent-gpu-1/jobs/" + id); }));
}

TEST_F(AgentTest, AJobRunsInItsUploadedWorkspace) {
  add_agent("gpu-1");
  TempDir source;
  fs::create_directories(source.path() + "/src");
  std::ofstream(source.path() + "/src/data.txt") << "from the workspace\n";
  agent::PackOptions options;
  options.output_path = source.path() + ".tgz";
  auto packed = agent::pack_workspace(source.path(), options);
  ASSERT_TRUE(packed) << packed.error().to_string();
  std::ifstream in(packed->archive_path, std::ios::binary);
  std::string archive((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto put = admin_->request("PUT", "/v1/workspaces/" + packed->digest + "?project=default", archive);
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 201) << put->body;
  std::string id = submit({"cat", "data.txt"}, "h100-25", 256,
                          {{"working_dir", "src"},
                           {"workspace", {{"digest", packed->digest}, {"size_bytes", static_cast<int64_t>(archive.size())}}}});
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  EXPECT_THAT(texts(logs(id)), ElementsAre("from the workspace"));
}

TEST_F(AgentTest, ANonZeroExitFailsWithItsCodeAndLastErrorLine) {
  add_agent("gpu-1");
  std::string id = submit({"sh", "-c", "echo working; echo 'ValueError: bad input' >&2; exit 3"});
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["exit_code"], 3);
  EXPECT_EQ(job["status"]["message"], "ValueError: bad input");
}

TEST_F(AgentTest, AJobOverItsMemoryLimitIsReportedAsOomKilled) {
  add_agent("gpu-1");
  std::string id = submit({"python3", "-c", "x = bytearray(400 * 1024 * 1024)\nprint('survived')"}, "h100-25", 64);
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["signal"], 9);
  EXPECT_THAT(job["status"]["message"].get<std::string>(), HasSubstr("OOMKilled"));
  EXPECT_THAT(job["status"]["message"].get<std::string>(), HasSubstr("64 MiB"));
}

TEST_F(AgentTest, ACancelledJobThatIgnoresSigtermIsKilledWithItsWholeTree) {
  add_agent("gpu-1");
  // The job and a child both ignore SIGTERM.
  std::string id = submit({"python3", "-c",
                           "import os, signal, subprocess, time\n"
                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                           "subprocess.Popen(['python3', '-c', 'import signal, time\\n"
                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(300)  # marker-stubborn-child'])\n"
                           "print('ignoring TERM', flush=True)\n"
                           "time.sleep(300)"});
  ASSERT_TRUE(eventually([&] { return texts(logs(id)) == std::vector<std::string>{"ignoring TERM"}; }, 20s));
  ASSERT_TRUE(process_with("marker-stubborn-child"));
  call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200);
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Cancelled");
  EXPECT_EQ(job["status"]["signal"], 9);  // SIGTERM was ignored: killed after the grace
  EXPECT_FALSE(process_with("marker-stubborn-child"));
}

TEST_F(AgentTest, AnAgentKilledMidJobAdoptsItOnRestartAndItsLogContinues) {
  AgentProcess& agent = add_agent("gpu-1");
  std::string id = submit({"python3", "-c", "import time\nfor i in range(30):\n  print('tick', i, flush=True)\n  time.sleep(0.1)"});
  ASSERT_TRUE(eventually([&] { return logs(id).size() >= 3; }, 20s));
  agent.stop(SIGKILL);
  std::this_thread::sleep_for(1s);  // the job keeps printing meanwhile
  agent.start();
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  std::vector<std::string> expected;
  for (int i = 0; i < 30; ++i) expected.push_back("tick " + std::to_string(i));
  EXPECT_EQ(texts(logs(id)), expected);  // nothing lost, nothing twice
  EXPECT_THAT(agent.log(), HasSubstr("job adopted job=\"" + id + "\""));
}

TEST_F(AgentTest, AServerRestartedMidJobLosesAndDoublesNoLogLine) {
  add_agent("gpu-1");
  std::string id = submit({"python3", "-c", "import time\nfor i in range(40):\n  print('line', i, flush=True)\n  time.sleep(0.05)"});
  ASSERT_TRUE(eventually([&] { return logs(id).size() >= 3; }, 20s));
  server_->stop(SIGKILL);
  std::this_thread::sleep_for(1s);
  server_->start({"--not-ready-after", "2s", "--lost-after", "4s"});
  admin_ = server_->client(server_->admin_token());
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  auto lines = logs(id);
  std::vector<std::string> expected;
  for (int i = 0; i < 40; ++i) expected.push_back("line " + std::to_string(i));
  EXPECT_EQ(texts(lines), expected);
}

TEST_F(AgentTest, ANodeWhoseAgentDiesIsLostItsJobRunsElsewhereAndTheReturningAgentStopsItsCopy) {
  AgentProcess& first = add_agent("gpu-1", "h100");
  AgentProcess& second = add_agent("gpu-2", "h100");
  std::string id = submit({"python3", "-c", "import os, time\nprint('on', os.environ['CNLAB_NODE'], flush=True)\ntime.sleep(6)"}, "h100x1");
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Running"));
  std::string dead_node = node_of(id), other = dead_node == "gpu-1" ? "gpu-2" : "gpu-1";
  AgentProcess& dying = dead_node == "gpu-1" ? first : second;
  dying.stop(SIGKILL);
  // Lost after 4 s of silence; the job is requeued and runs on the other node.
  ASSERT_TRUE(eventually([&] { return call(*admin_, "GET", "/v1/nodes/" + dead_node, 200)["status"]["phase"] == "Lost"; }, 20s));
  // One read per look: between two reads the job can leave its dead node (requeued, no placement).
  ASSERT_TRUE(eventually([&] {
    Json job = get_job(*admin_, id);
    return job["status"]["phase"] == "Running" && job["status"]["placement"].size() == 1 &&
           job["status"]["placement"][0]["node"] == other;
  }, 20s)) << get_job(*admin_, id).dump();
  // Back before its old copy ended: it stops that copy and reports nothing for it.
  dying.start();
  EXPECT_TRUE(eventually([&] { return !fs::exists(dying.data_dir() + "/jobs/" + id); }, 10s));
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  EXPECT_EQ(job["status"]["placement"][0]["node"], other);
  EXPECT_THAT(texts(logs(id)), ::testing::Contains("on " + other));
}

TEST_F(AgentTest, AGangRunsOneProcessPerNodeWithTheRendezvousEnvironment) {
  add_agent("gpu-1");
  add_agent("gpu-2");
  std::string id = submit({"python3", "-c",
                           "import os\nprint(' '.join(os.environ[k] for k in "
                           "['RANK', 'WORLD_SIZE', 'NODE_RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'CNLAB_NODE']))"},
                          "h100x4");
  Json job = wait_for_end(id);
  ASSERT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  ASSERT_EQ(job["status"]["placement"].size(), 2u);
  std::string rank0 = job["status"]["placement"][0]["node"], rank1 = job["status"]["placement"][1]["node"];
  auto lines = texts(logs(id));
  ASSERT_EQ(lines.size(), 2u);
  std::vector<std::string> fields0, fields1;
  for (const auto& line : lines) {
    std::stringstream s(line);
    std::vector<std::string> f;
    for (std::string w; s >> w;) f.push_back(w);
    ASSERT_EQ(f.size(), 7u) << line;
    (f[0] == "0" ? fields0 : fields1) = f;
  }
  EXPECT_EQ(fields0[6], rank0);
  EXPECT_EQ(fields1[6], rank1);
  EXPECT_EQ(fields0[1], "2");
  EXPECT_EQ(fields1[2], "1");
  EXPECT_EQ(fields0[4], fields1[4]);  // both ranks agree on MASTER_ADDR and MASTER_PORT
  EXPECT_EQ(fields0[5], fields1[5]);
}

TEST_F(AgentTest, AFailingGangMemberStopsTheOtherMembers) {
  add_agent("gpu-1");
  add_agent("gpu-2");
  std::string id = submit({"python3", "-c",
                           "import os, sys, time\n"
                           "if os.environ['RANK'] == '1': sys.exit(5)\n"
                           "time.sleep(120)  # marker-gang-rank0"},
                          "h100x4");
  Json job = wait_for_end(id);
  EXPECT_EQ(job["status"]["phase"], "Failed") << job.dump();
  EXPECT_EQ(job["status"]["exit_code"], 5);
  EXPECT_TRUE(eventually([&] { return !process_with("marker-gang-rank0"); }, 10s));
}

TEST_F(AgentTest, WithoutCgroupsOrNamespacesJobsStillRunAndStop) {
  add_agent("gpu-1", "h100x2", {"--no-cgroups", "--no-namespaces"});
  std::string ok = submit({"sh", "-c", "echo plain"});
  EXPECT_EQ(wait_for_end(ok)["status"]["phase"], "Succeeded");
  EXPECT_THAT(texts(logs(ok)), ElementsAre("plain"));
  std::string stubborn = submit({"sh", "-c", "trap '' TERM; echo up; sleep 300 # marker-plain-stubborn"});
  ASSERT_TRUE(eventually([&] { return !logs(stubborn).empty(); }, 20s));
  call(*admin_, "POST", "/v1/jobs/" + stubborn + "/cancel", 200);
  EXPECT_EQ(wait_for_end(stubborn)["status"]["phase"], "Cancelled");
  EXPECT_FALSE(process_with("marker-plain-stubborn"));
}

TEST_F(AgentTest, ASimulatedGpuFaultMakesTheGpuUnhealthyOnTheServer) {
  AgentProcess& agent = add_agent("gpu-1");
  std::ofstream(agent.data_dir() + "/faults/gpu1.fault") << "XidError 79\n";
  EXPECT_TRUE(eventually([&] { return !call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["gpus"][1]["healthy"].get<bool>(); }));
  Json node = call(*admin_, "GET", "/v1/nodes/gpu-1", 200);
  EXPECT_TRUE(node["status"]["gpus"][0]["healthy"].get<bool>());
  EXPECT_THAT(node["status"]["conditions"][0]["message"].get<std::string>(), HasSubstr("XidError 79"));
}


TEST_F(AgentTest, APreemptedCheckpointableJobSavesAndResumesFromItsCheckpoint) {
  add_agent("gpu-1", "h100");
  // Counts to 40; on SIGUSR1 saves its step and exits; started again, carries on from the step saved.
  std::string counter = submit({"python3", "-c",
                                "import os, signal, sys, time\n"
                                "path = os.path.join(os.environ['CNLAB_CHECKPOINT_DIR'], 'step')\n"
                                "step = int(open(path).read()) if os.path.exists(path) else 0\n"
                                "print('resumed at', step, os.environ.get('CNLAB_RESUMED', '0'), flush=True)\n"
                                "def save(*_):\n"
                                "  open(path, 'w').write(str(step))\n"
                                "  print('saved', step, flush=True)\n"
                                "  sys.exit(0)\n"
                                "signal.signal(signal.SIGUSR1, save)\n"
                                "while step < 40:\n"
                                "  step += 1\n"
                                "  time.sleep(0.05)\n"
                                "print('finished at', step, flush=True)"},
                               "h100x1", 256, {{"priority_class", "opportunistic"}, {"checkpointable", true}});
  ASSERT_TRUE(eventually([&] { return !logs(counter).empty(); }, 20s));
  std::string urgent = submit({"sleep", "1"}, "h100x1", 256, {{"priority_class", "production"}});
  EXPECT_EQ(wait_for_end(urgent)["status"]["phase"], "Succeeded");
  Json job = wait_for_end(counter);
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump() << agents_[0]->log();
  // What it prints once taken off the node ("saved N") is still its node's to ship, before the
  // resumed attempt's lines.
  auto lines = texts(logs(counter));
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "resumed at 0 0");
  EXPECT_THAT(lines[1], ::testing::StartsWith("saved "));
  EXPECT_THAT(lines[2], ::testing::EndsWith(" 1"));  // CNLAB_RESUMED=1: handed back its own checkpoint
  EXPECT_EQ(lines[2], "resumed at " + lines[1].substr(6) + " 1");
  EXPECT_EQ(lines.back(), "finished at 40");
}


TEST_F(AgentTest, APreemptedJobsCheckpointIsUploadedAndHandedBackWhenItResumesOnAnotherNode) {
  add_agent("gpu-1", "h100", {"--checkpoint-grace", "5s"});
  // Waits; on SIGUSR1 saves where it is (a file in a subdirectory) and exits. Started again with a
  // checkpoint, prints what it finds there and ends.
  std::string job = submit({"python3", "-c",
                            "import os, signal, sys, time\n"
                            "base = os.environ['CNLAB_CHECKPOINT_DIR']\n"
                            "path = os.path.join(base, 'state', 'step.txt')\n"
                            "if os.path.exists(path):\n"
                            "  print('restored on', os.environ['CNLAB_NODE'] + ':', open(path).read(),\n"
                            "        os.environ.get('CNLAB_RESUMED', '0'), flush=True)\n"
                            "  sys.exit(0)\n"
                            "print('fresh start on', os.environ['CNLAB_NODE'], flush=True)\n"
                            "def save(*_):\n"
                            "  os.makedirs(os.path.dirname(path), exist_ok=True)\n"
                            "  open(path, 'w').write('step 17 saved on ' + os.environ['CNLAB_NODE'])\n"
                            "  sys.exit(0)\n"
                            "signal.signal(signal.SIGUSR1, save)\n"
                            "while True:\n"
                            "  time.sleep(0.05)\n"},
                           "h100x1", 256, {{"priority_class", "opportunistic"}, {"checkpointable", true}});
  ASSERT_TRUE(eventually([&] { return !logs(job).empty(); }, 20s));
  // Pre-empted on gpu-1 by a job that keeps the GPU; the agent uploads what the job saved.
  std::string urgent = submit({"sleep", "300"}, "h100x1", 256, {{"priority_class", "production"}});
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, job)["status"].contains("checkpoint"); }, 20s))
      << get_job(*admin_, job).dump() << agents_[0]->log();
  std::string digest = get_job(*admin_, job)["status"]["checkpoint"]["digest"];
  // The agent logs the upload once the server has answered it, a little after the job shows it.
  const std::string uploaded = "job checkpoint uploaded job=\"" + job + "\" digest=\"" + digest + "\"";
  EXPECT_TRUE(eventually([&] { return agents_[0]->log().find(uploaded) != std::string::npos; }, 10s)) << agents_[0]->log();

  // gpu-1 takes no new work; the job resumes on gpu-2, which has never seen it.
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  add_agent("gpu-2", "h100");
  Json ended = wait_for_end(job);
  EXPECT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[1]->log();
  EXPECT_THAT(texts(logs(job)), ElementsAre("fresh start on gpu-1", "restored on gpu-2: step 17 saved on gpu-1 1"));
  std::string started = ended["status"]["events"].dump();
  EXPECT_THAT(started, HasSubstr("started on gpu-2; resumed from checkpoint " + digest));
  EXPECT_THAT(agents_[1]->log(), HasSubstr("job checkpoint restored job=\"" + job + "\" digest=\"" + digest + "\""));
  call(*admin_, "POST", "/v1/jobs/" + urgent + "/cancel", 200);
  EXPECT_EQ(wait_for_end(urgent)["status"]["phase"], "Cancelled");  // its sleep ends before the agents stop
}

// A pre-empting job is bound at once, but its agent starts it only once the job it pre-empted has
// saved its state and left what the two cannot share: both at once could run the GPU out of memory,
// or the host out of CPU and memory.
class PreemptorWaitTest : public AgentTest {
 protected:
  // Submits a checkpointable opportunistic job whose save on SIGUSR1 takes 2 s (a GPU job copying
  // its state out) and prints when it left; then `urgent_gpu` at production priority, which
  // pre-empts it. Checks that the urgent job printed its start no earlier than the victim left, and
  // that the agent logged the wait for `what`.
  void expect_the_preemptor_waits(const std::string& victim_gpu, const std::string& urgent_gpu, int64_t cpu_milli,
                                  const std::string& what) {
    std::string victim = submit({"python3", "-c",
                                 "import os, signal, sys, time\n"
                                 "def save(*_):\n"
                                 "  time.sleep(2)\n"
                                 "  open(os.path.join(os.environ['CNLAB_CHECKPOINT_DIR'], 'saved'), 'w').write('x')\n"
                                 "  print('left at', time.time(), flush=True)\n"
                                 "  sys.exit(0)\n"
                                 "signal.signal(signal.SIGUSR1, save)\n"
                                 "if os.path.exists(os.path.join(os.environ['CNLAB_CHECKPOINT_DIR'], 'saved')):\n"
                                 "  sys.exit(0)\n"
                                 "print('running', flush=True)\n"
                                 "while True:\n"
                                 "  time.sleep(0.05)\n"},
                                victim_gpu, 256,
                                {{"priority_class", "opportunistic"}, {"checkpointable", true}, {"cpu_milli", cpu_milli}});
    ASSERT_TRUE(eventually([&] { return !logs(victim).empty(); }, 20s));
    std::string urgent = submit({"python3", "-c", "import time; print('started at', time.time(), flush=True)"},
                                urgent_gpu, 256, {{"priority_class", "production"}, {"cpu_milli", cpu_milli}});
    EXPECT_EQ(wait_for_end(urgent)["status"]["phase"], "Succeeded");
    EXPECT_EQ(wait_for_end(victim)["status"]["phase"], "Succeeded") << "resumed after it, and ended";
    const auto victim_lines = texts(logs(victim));
    const auto urgent_lines = texts(logs(urgent));
    ASSERT_EQ(victim_lines.size(), 2u) << ::testing::PrintToString(victim_lines);
    ASSERT_EQ(urgent_lines.size(), 1u) << ::testing::PrintToString(urgent_lines);
    const double left = std::stod(victim_lines[1].substr(std::string("left at ").size()));
    const double started = std::stod(urgent_lines[0].substr(std::string("started at ").size()));
    EXPECT_GE(started, left) << "the pre-empting job started while the job it pre-empted still held " << what;
    EXPECT_THAT(agents_[0]->log(), HasSubstr("job bound, waits for " + what + " job=\"" + urgent +
                                             "\" node=\"gpu-1\" leaving=\"" + victim + "\""));
  }
};

TEST_F(PreemptorWaitTest, APreemptingJobStartsOnlyOnceTheJobItPreemptedHasLeftTheGpu) {
  add_agent("gpu-1", "h100", {"--checkpoint-grace", "10s"});
  expect_the_preemptor_waits("h100x1", "h100x1", 1000, "its GPUs");
}

TEST_F(PreemptorWaitTest, ACpuOnlyPreemptorWaitsForTheHostCpuItsVictimStillHolds) {
  // Two cores offered, 1.5 asked by each: the two do not fit side by side on host CPU. The urgent
  // job asks no GPU, so none of the victim's is in its way: only the host CPU it holds while it saves.
  add_agent("gpu-1", "h100x2", {"--checkpoint-grace", "10s", "--cpu-milli", "2000"});
  expect_the_preemptor_waits("h100x1", "none", 1500, "host CPU and memory");
}

TEST_F(AgentTest, TheAgentAppliesTheMigLayoutTheSchedulerDecided) {
  add_agent("gpu-1", "h100:mig");
  std::string id = submit({"sh", "-c", "echo in a MIG slice; sleep 3"}, "h100:3g.40gb");
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Running"));
  // Heartbeats report the layout the GPU has: the decided instance is still there after several,
  // so the agent created it (had it not, the next heartbeat would have reported none).
  std::this_thread::sleep_for(2500ms);
  Json gpu = call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["gpus"][0];
  ASSERT_EQ(gpu["mig_instances"].size(), 1u) << gpu.dump();
  EXPECT_EQ(gpu["mig_instances"][0]["profile"], "3g.40gb");
  EXPECT_EQ(wait_for_end(id)["status"]["phase"], "Succeeded");
  EXPECT_THAT(agents_[0]->log(), HasSubstr("mig layout applied node=\"gpu-1\" gpu=0 created=1"));
}

}  // namespace
}  // namespace cnlab::server::test_support
