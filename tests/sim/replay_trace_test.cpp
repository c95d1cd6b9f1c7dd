#include "sim/replay_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shared_data.h"

#include <filesystem>
#include <map>

#include "sim/replay_cluster.h"

namespace cnlab::sim {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kOpenbHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

Error trace_error(const std::string& text) {
  auto trace = parse_replay_trace(text, "t.csv");
  EXPECT_FALSE(trace) << "expected an error for: " << text;
  return trace ? Error{} : trace.error();
}

TEST(ReplayTrace, OpenbPodsGetClassFromQosRunTimeFromScheduledTimeAndOneProject) {
  auto trace = parse_replay_trace(std::string(kOpenbHeader) +
                                      "a,1000,2048,1,460,,LS,Running,100,1100,130\n"
                                      "b,0,0,0,0,,BE,Pending,50,80,\n"
                                      "c,2000,0,2,1000,V100M16|T4,Guaranteed,Running,10,20,10\n"
                                      "d,1000,0,1,995,,Burstable,Running,0,0,0\n",
                                  "pods.csv");
  ASSERT_TRUE(trace) << trace.error().to_string();
  EXPECT_EQ(trace->format, TraceFormat::kOpenb);
  ASSERT_EQ(trace->jobs.size(), 4u);
  // Sorted by submit time: d (0), c (10), b (50), a (100).
  const ReplayJob& d = trace->jobs[0];
  const ReplayJob& c = trace->jobs[1];
  const ReplayJob& b = trace->jobs[2];
  const ReplayJob& a = trace->jobs[3];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.submit, trace_time(100));
  EXPECT_EQ(a.run_time, Duration{970});  // deletion - scheduled
  EXPECT_EQ(a.spec.priority_class, "production");
  EXPECT_EQ(a.spec.project, "openb");
  EXPECT_EQ(a.spec.gpu.kind, model::SliceKind::kBlocks);
  EXPECT_EQ(a.spec.gpu.blocks, 46);
  EXPECT_EQ(a.spec.cpu_milli, 1000);
  EXPECT_EQ(a.spec.memory_mib, 2048);
  EXPECT_EQ(b.run_time, Duration{30});  // never scheduled: deletion - creation
  EXPECT_EQ(b.spec.priority_class, "opportunistic");
  EXPECT_EQ(b.spec.gpu.kind, model::SliceKind::kNone);
  EXPECT_EQ(c.spec.priority_class, "inference");
  EXPECT_EQ(c.spec.gpu.kind, model::SliceKind::kWhole);
  EXPECT_EQ(c.spec.gpu.gpu_count, 2);
  EXPECT_EQ(model::format_model_mask(c.spec.gpu.models), "t4|v100m16");
  EXPECT_EQ(d.spec.priority_class, "dev");
  EXPECT_EQ(d.run_time, Duration{1});  // a run time of 0 becomes 1 s
  EXPECT_EQ(d.spec.gpu.kind, model::SliceKind::kWhole);  // 995 milli rounds up to a whole GPU
  EXPECT_EQ(trace->unscheduled, 1u);
  EXPECT_EQ(trace->zero_run_time, 1u);
}

TEST(ReplayTrace, OpenbListWithoutTimeColumnsIsRefusedWithTheReason) {
  Error e = trace_error("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,0,1,1000\n");
  EXPECT_EQ(e.field, "t.csv");
  EXPECT_THAT(e.message, HasSubstr("no creation_time and deletion_time"));
  EXPECT_THAT(e.message, HasSubstr("multigpu20"));
}

TEST(ReplayTrace, OpenbPodWithoutTimesIsRefusedNamingThePod) {
  Error e = trace_error(std::string(kOpenbHeader) + "ok,0,0,1,1000,,LS,Running,1,5,1\nlate,0,0,1,1000,,LS,Running,3,,\n");
  EXPECT_EQ(e.field, "t.csv: pod late");
  EXPECT_EQ(e.value, "no deletion_time");
  EXPECT_THAT(e.message, HasSubstr("needs creation_time and deletion_time"));
  Error before = trace_error(std::string(kOpenbHeader) + "p,0,0,1,1000,,LS,Running,10,5,8\n");
  EXPECT_THAT(before.message, HasSubstr("before the pod started"));
}

TEST(ReplayTrace, UnknownQosAndUnknownGpuSpecAreRefused) {
  Error qos = trace_error(std::string(kOpenbHeader) + "p,0,0,1,1000,,Gold,Running,1,5,1\n");
  EXPECT_EQ(qos.field, "t.csv: pod p: qos");
  EXPECT_THAT(qos.message, HasSubstr("LS (-> production)"));
  Error spec = trace_error(std::string(kOpenbHeader) + "p,0,0,1,1000,X9,LS,Running,1,5,1\n");
  EXPECT_EQ(spec.field, "t.csv: pod p: gpu_spec");
  EXPECT_THAT(spec.message, HasSubstr("known models"));
}

TEST(ReplayTrace, GenericRowsBecomeBlocksWholeGpusClassesProjectsAndDeadlines) {
  auto trace = parse_replay_trace(
      "submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n"
      "10.7,99.2,1,0.25,H100,vision,inference,500.9\n"
      "0,60,4,,,,,\n"
      "5,30,1,0.29,,nlp,Opportunistic,\n"
      "6,30,0,,l4,nlp,dev,\n",
      "jobs.csv");
  ASSERT_TRUE(trace) << trace.error().to_string();
  ASSERT_EQ(trace->jobs.size(), 4u);
  const ReplayJob& whole = trace->jobs[0];
  EXPECT_EQ(whole.name, "line-3");
  EXPECT_EQ(whole.spec.gpu.kind, model::SliceKind::kWhole);
  EXPECT_EQ(whole.spec.gpu.gpu_count, 4);
  EXPECT_EQ(whole.spec.project, "default");
  EXPECT_EQ(whole.spec.priority_class, "dev");
  EXPECT_FALSE(whole.spec.deadline);
  const ReplayJob& small = trace->jobs[1];
  EXPECT_EQ(small.spec.gpu.blocks, 29);  // 0.29 * 100 is 28.999...: not 30
  EXPECT_EQ(small.spec.priority_class, "opportunistic");
  const ReplayJob& host = trace->jobs[2];
  EXPECT_EQ(host.spec.gpu.kind, model::SliceKind::kNone);
  const ReplayJob& share = trace->jobs[3];
  EXPECT_EQ(share.submit, trace_time(10));        // rounded down
  EXPECT_EQ(share.run_time, Duration{100});       // rounded up
  EXPECT_EQ(share.spec.deadline, trace_time(500));  // rounded down
  EXPECT_EQ(share.spec.gpu.kind, model::SliceKind::kBlocks);
  EXPECT_EQ(share.spec.gpu.blocks, 25);
  EXPECT_EQ(model::format_model_mask(share.spec.gpu.models), "h100");
  EXPECT_EQ(share.spec.project, "vision");
  EXPECT_EQ(share.spec.user, "vision");
}

TEST(ReplayTrace, GenericUnknownModelOrClassNamesFileAndLine) {
  Error model = trace_error("submit_time,duration,num_gpus,model\n0,10,1,h100\n5,10,1,h900\n");
  EXPECT_EQ(model.field, "t.csv:3: model");
  EXPECT_EQ(model.value, "h900");
  EXPECT_THAT(model.message, HasSubstr("known models: a10"));
  Error cls = trace_error("submit_time,duration,num_gpus,class\n0,10,1,batch\n");
  EXPECT_EQ(cls.field, "t.csv:2: class");
  EXPECT_THAT(cls.message, HasSubstr("inference, production, dev, opportunistic"));
}

TEST(ReplayTrace, GenericTimesBeyondTheEnginesRangeAreRefused) {
  Error e = trace_error("submit_time,duration,num_gpus\n0,1e30,1\n");
  EXPECT_EQ(e.field, "t.csv:2: duration");
  EXPECT_EQ(e.value, "1e+30");
  EXPECT_THAT(e.message, HasSubstr("at most 1099511627776 seconds"));
}

TEST(ReplayTrace, UnknownHeaderListsBothFormats) {
  Error e = trace_error("a,b,c\n1,2,3\n");
  EXPECT_THAT(e.message, HasSubstr("openb pod list"));
  EXPECT_THAT(e.message, HasSubstr("submit_time,duration,num_gpus"));
}

TEST(ReplayTrace, PublishedDefaultTraceLoadsWithItsQosMix) {
  CNLAB_SKIP_WITHOUT_OPENB_TRACE();
  auto trace = load_replay_trace(testing::openb_path("openb_pod_list_default.csv"));
  ASSERT_TRUE(trace) << trace.error().to_string();
  EXPECT_EQ(trace->jobs.size(), 8152u);
  EXPECT_EQ(trace->unscheduled, 897u);
  std::map<std::string, int> classes;
  for (const ReplayJob& job : trace->jobs) ++classes[job.spec.priority_class];
  EXPECT_EQ(classes["inference"], 7);
  EXPECT_EQ(classes["production"], 4647);
  EXPECT_EQ(classes["dev"], 100);
  EXPECT_EQ(classes["opportunistic"], 3398);
  auto multigpu = load_replay_trace(testing::openb_path("openb_pod_list_multigpu20.csv"));
  EXPECT_FALSE(multigpu);
}

TEST(ReplayCluster, SpecBuildsNamedNodesWithHostResourcesPerGpu) {
  auto nodes = parse_cluster_spec("2:h100x8, 1:L4x2,1:mi300xx4", {.cpu_milli = 8000, .memory_mib = 1024});
  ASSERT_TRUE(nodes) << nodes.error().to_string();
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].meta.name, "n00000-h100");
  EXPECT_EQ((*nodes)[2].meta.name, "n00002-l4");
  EXPECT_EQ((*nodes)[0].gpus.size(), 8u);
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[0].memory_mib, 8192);
  EXPECT_EQ((*nodes)[2].gpus.size(), 2u);
  EXPECT_EQ(model::gpu_model((*nodes)[3].gpus[0].model).name, "mi300x");
  EXPECT_EQ((*nodes)[3].gpus.size(), 4u);
  EXPECT_EQ(describe_cluster(*nodes), "4 nodes, 22 GPUs (h100 x 16, l4 x 2, mi300x x 4)");
}

TEST(ReplayCluster, MalformedSpecsNameTheGroupAndWhatIsAllowed) {
  struct Case {
    std::string spec, value, says;
  };
  for (const Case& c : std::vector<Case>{
           {"", "", "empty"},
           {"h100x8", "h100x8", "missing ':'"},
           {"0:h100x8", "0:h100x8", "COUNT \"0\" must be a whole number 1..100000"},
           {"two:h100x8", "two:h100x8", "COUNT \"two\""},
           {"300:h100x8,20:h900x2", "20:h900x2", "unknown GPU model \"h900\"; known models: a10"},
           {"3:h100", "3:h100", "missing 'x'"},
           {"3:h100x0", "3:h100x0", "GPUS \"0\" must be a whole number 1..16"},
           {"3:h100x17", "3:h100x17", "1..16"},
           {"3:h100x8,", "", "missing ':'"},
           {"99999:h100x1,2:h100x1", "2:h100x1", "at most 100000 nodes"},
       }) {
    auto nodes = parse_cluster_spec(c.spec, {});
    ASSERT_FALSE(nodes) << c.spec;
    EXPECT_EQ(nodes.error().field, "--cluster") << c.spec;
    EXPECT_EQ(nodes.error().value, c.value) << c.spec;
    EXPECT_THAT(nodes.error().message, HasSubstr(c.says)) << c.spec;
    EXPECT_THAT(nodes.error().message, HasSubstr("300:h100x8,20:l4x2")) << c.spec;
  }
}

TEST(ReplayCluster, OpenbNodeWithAModelOutsideTheCatalogIsRefused) {
  std::vector<OpenbNode> list = {{"a", 1000, 1000, 2, "V100M32"}, {"b", 1000, 1000, 1, "Z80"}};
  auto nodes = nodes_from_openb(list, "nodes.csv");
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.error().field, "nodes.csv: node b: model");
  EXPECT_EQ(nodes.error().value, "Z80");
  list.pop_back();
  auto good = nodes_from_openb(list, "nodes.csv");
  ASSERT_TRUE(good) << good.error().to_string();
  EXPECT_EQ(model::gpu_model((*good)[0].gpus[1].model).name, "v100m32");
}

}  // namespace
}  // namespace cnlab::sim
