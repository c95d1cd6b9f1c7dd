#include "agent/gpu/simulated_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "gpu_test_support.h"
#include "model/node.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TempDir;

model::ModelId id(std::string_view name) { return *model::find_model(name); }

std::string spec_error(std::string_view spec) {
  auto parsed = parse_simulated_gpus(spec);
  if (parsed) return "<parsed>";
  EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(parsed.error().field, "--simulate-gpus");
  EXPECT_EQ(parsed.error().value, spec);
  return parsed.error().to_string();
}

std::unique_ptr<SimulatedBackend> make(std::string_view spec, std::string fault_dir = {}) {
  auto backend = SimulatedBackend::create("node-a", spec, std::move(fault_dir));
  EXPECT_TRUE(backend) << backend.error().to_string();
  return std::move(*backend);
}

TEST(SimulatedSpec, GroupsAreParsedInIndexOrder) {
  auto groups = parse_simulated_gpus("h100x8,l4x2");
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_THAT(*groups, ElementsAre(SimulatedGpuGroup{id("h100"), 8, false}, SimulatedGpuGroup{id("l4"), 2, false}));
}

TEST(SimulatedSpec, AModelAloneIsOneGpuAndNamesEndingInXStillParse) {
  auto groups = parse_simulated_gpus(" L4 , mi300x, mi300xx2 ");
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_THAT(*groups, ElementsAre(SimulatedGpuGroup{id("l4"), 1, false}, SimulatedGpuGroup{id("mi300x"), 1, false},
                                   SimulatedGpuGroup{id("mi300x"), 2, false}));
}

TEST(SimulatedSpec, MigSuffixStartsThoseGpusInMigMode) {
  auto groups = parse_simulated_gpus("a100m80x2:mig,h100");
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_THAT(*groups,
              ElementsAre(SimulatedGpuGroup{id("a100m80"), 2, true}, SimulatedGpuGroup{id("h100"), 1, false}));
}

TEST(SimulatedSpec, BadSpecsAreRefusedNamingTheFlagTheValueAndWhatIsAllowed) {
  EXPECT_EQ(spec_error(""),
            R"(--simulate-gpus "": expected comma-separated <model>x<count> groups, e.g. "h100x8,l4x2")");
  EXPECT_EQ(spec_error("h900x2"),
            R"(--simulate-gpus "h900x2": unknown GPU model "h900" in "h900x2"; known models: a10, a100m40, a100m80, )"
            R"(h100, h100nvl, h200, l4, l40s, mi250x, mi300x, p100, rtx6000ada, t4, v100m16, v100m32)");
  EXPECT_EQ(spec_error("h100x0"), R"(--simulate-gpus "h100x0": count 0 in "h100x0" must be 1..64)");
  EXPECT_EQ(spec_error("h100xabc"),
            R"(--simulate-gpus "h100xabc": count "abc" in "h100xabc" is not a whole number; expected )"
            R"(comma-separated <model>x<count> groups, e.g. "h100x8,l4x2")");
  EXPECT_EQ(spec_error("h100x-1"),
            R"(--simulate-gpus "h100x-1": count "-1" in "h100x-1" is not a whole number; expected )"
            R"(comma-separated <model>x<count> groups, e.g. "h100x8,l4x2")");
  EXPECT_EQ(spec_error("h100x2,,l4"),
            R"(--simulate-gpus "h100x2,,l4": group 2 is empty; expected comma-separated <model>x<count> groups, )"
            R"(e.g. "h100x8,l4x2")");
  EXPECT_EQ(spec_error("l4x2:mig"),
            R"(--simulate-gpus "l4x2:mig": l4 does not support MIG ("l4x2:mig"); MIG-capable models: a100m40, )"
            R"(a100m80, h100, h100nvl, h200)");
  EXPECT_EQ(spec_error("h100x2:fast"),
            R"(--simulate-gpus "h100x2:fast": unknown option ":fast" in "h100x2:fast"; the only option is ":mig")");
  EXPECT_EQ(spec_error("g1x2"),
            R"(--simulate-gpus "g1x2": g1 cannot be simulated: its memory is undisclosed; known models: a10, )"
            R"(a100m40, a100m80, h100, h100nvl, h200, l4, l40s, mi250x, mi300x, p100, rtx6000ada, t4, v100m16, )"
            R"(v100m32)");
  EXPECT_EQ(spec_error("h100x40,l4x30"),
            R"(--simulate-gpus "h100x40,l4x30": 64 GPUs at most on one node; this asks for more)");
}

TEST(SimulatedBackend, GpusAreLabelledSimulatedWithStableUuidsAndCatalogMemory) {
  auto backend = make("h100x2,l4");
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(3));
  EXPECT_EQ(gpus[0].uuid, "GPU-node-a-0");
  EXPECT_EQ(gpus[2].uuid, "GPU-node-a-2");
  EXPECT_EQ(gpus[0].model, id("h100"));
  EXPECT_EQ(gpus[2].model, id("l4"));
  EXPECT_EQ(gpus[0].memory_mib, model::gpu_model(id("h100")).memory_mib);
  EXPECT_EQ(gpus[2].memory_mib, model::gpu_model(id("l4")).memory_mib);
  for (const auto& g : gpus) EXPECT_TRUE(g.simulated);
  EXPECT_EQ(backend->kind(), "simulated");

  // The same node and spec after a restart: the same UUIDs, and model::simulated_node's convention.
  auto restarted = make("h100x2,l4");
  EXPECT_EQ(restarted->gpus()[1].uuid, gpus[1].uuid);
  EXPECT_EQ(model::simulated_node("node-a", id("h100"), 2, 1000, 1000).gpus[1].uuid, gpus[1].uuid);
}

TEST(SimulatedBackend, ModelGpusValidateAndAreMarkedSimulated) {
  auto backend = make("a100m80x2:mig,l4");
  ASSERT_TRUE(backend->create_mig_instance(0, {3, 4}));  // 3g.40gb@4
  model::Node node;
  node.meta.name = "node-a";
  node.simulated = true;
  node.gpus = to_model_gpus(*backend);
  auto valid = model::validate(node);
  EXPECT_TRUE(valid) << valid.error().to_string();
  EXPECT_TRUE(node.gpus[0].mig_enabled);
  EXPECT_THAT(node.gpus[0].mig_instances, ElementsAre(model::MigInstance{3, 4}));
  EXPECT_FALSE(node.gpus[2].mig_enabled);
  for (const auto& g : node.gpus) EXPECT_TRUE(g.simulated);
}

TEST(SimulatedBackend, InjectedXidMakesTheGpuUnhealthyAtTheNextPollAndItStaysSo) {
  auto backend = make("h100x2");
  ASSERT_TRUE(backend->inject_xid(1, 79));
  EXPECT_TRUE(backend->gpus()[1].healthy);  // not before the poll
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{1, "GPU-node-a-1", "XidError 79"}));
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  EXPECT_FALSE(backend->gpus()[1].healthy);
  EXPECT_EQ(backend->gpus()[1].unhealthy_reason, "XidError 79");
  EXPECT_TRUE(backend->gpus()[0].healthy);
}

TEST(SimulatedBackend, ApplicationXidIsIgnoredAndEccIsAFault) {
  auto backend = make("h100x2");
  ASSERT_TRUE(backend->inject_xid(0, 31));
  ASSERT_TRUE(backend->inject_ecc(1));
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{1, "GPU-node-a-1", "EccUncorrectable"}));
  EXPECT_TRUE(backend->gpus()[0].healthy);
}

TEST(SimulatedBackend, FaultFileMakesTheGpuUnhealthyWithItsReasonAndRemovingItDoesNotHeal) {
  TempDir dir;
  auto backend = make("l4x4", dir.path().string());
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  dir.write("gpu2.fault", "XidError 79\nthe second line is not part of the reason\n");
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{2, "GPU-node-a-2", "XidError 79"}));
  std::filesystem::remove(dir.path() / "gpu2.fault");
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  EXPECT_FALSE(backend->gpus()[2].healthy);
  EXPECT_EQ(backend->gpus()[2].unhealthy_reason, "XidError 79");
}

TEST(SimulatedBackend, EmptyFaultFileIsAnInjectedFault) {
  TempDir dir;
  auto backend = make("l4x2", dir.path().string());
  dir.write("gpu0.fault", "");
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{0, "GPU-node-a-0", "InjectedFault"}));
}

TEST(SimulatedBackend, UsageReportsWhatWasSet) {
  auto backend = make("h100");
  ASSERT_TRUE(backend->set_usage(0, 4096, 55));
  ASSERT_TRUE(backend->set_compute_processes(0, 3));
  auto usage = backend->usage(0);
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->memory_used_mib, 4096);
  EXPECT_EQ(usage->memory_total_mib, model::gpu_model(id("h100")).memory_mib);
  EXPECT_EQ(usage->utilization_percent, 55);
  EXPECT_EQ(usage->compute_processes, 3);
}

TEST(SimulatedBackend, IndexOutOfRangeIsNotFound) {
  auto backend = make("h100x2");
  auto usage = backend->usage(2);
  ASSERT_FALSE(usage);
  EXPECT_EQ(usage.error().to_string(), R"(gpu "2": this node has 2 simulated GPUs (indices 0..1))");
  EXPECT_FALSE(backend->inject_xid(-1, 79));
  EXPECT_FALSE(backend->create_mig_instance(5, {0, 0}));
}

TEST(SimulatedBackend, MigInstancesFollowNvidiaPlacementRules) {
  auto backend = make("h100:mig");
  ASSERT_TRUE(backend->create_mig_instance(0, {3, 0}));  // 3g.40gb@0
  auto overlap = backend->create_mig_instance(0, {2, 2});  // 2g.20gb@2 overlaps slots 0..3
  ASSERT_FALSE(overlap);
  EXPECT_THAT(overlap.error().message, ::testing::HasSubstr("overlap"));
  auto bad_start = backend->create_mig_instance(0, {3, 2});
  ASSERT_FALSE(bad_start);
  EXPECT_THAT(bad_start.error().message, ::testing::HasSubstr("3g.40gb may start only at slot 0,4"));
  EXPECT_THAT(backend->gpus()[0].mig_instances(), ElementsAre(model::MigInstance{3, 0}));
  auto missing = backend->destroy_mig_instance(0, {3, 4});
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(backend->destroy_mig_instance(0, {3, 0}));
  EXPECT_THAT(backend->gpus()[0].mig_instances(), IsEmpty());
}

}  // namespace
}  // namespace cnlab::agent
