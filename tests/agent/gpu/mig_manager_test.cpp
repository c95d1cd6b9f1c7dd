// The MIG manager against the fake NVML and against the simulated backend: both must apply a legal
// layout by diffing, and refuse the same things before touching the GPU.
#include "agent/gpu/mig_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/gpu/simulated_backend.h"
#include "gpu_test_support.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::FakeNvml;

model::ModelId h100() { return *model::find_model("h100"); }
model::MigInstance at(std::string_view profile, int start) {
  return {*model::parse_mig_profile(h100(), profile, "profile"), start};
}

constexpr const char* kEmptyMigH100 = R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-h100-0 mig=on
gpu name="NVIDIA L4" uuid=GPU-l4-1
)";

// 3g.40gb at 0 and at 4, each with its compute instance.
constexpr const char* kTwoThreeGs = R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-h100-0 mig=on
instance gpu=0 profile=2 start=0
instance gpu=0 profile=2 start=4
)";

TEST(MigManagerNvml, LegalLayoutIsCreatedAsGpuInstancesWithFullComputeInstances) {
  FakeNvml fake(kEmptyMigH100);
  auto backend = fake.open();
  MigManager manager(*backend);
  auto change = manager.apply(0, {at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)});
  ASSERT_TRUE(change) << change.error().to_string();
  EXPECT_THAT(change->created, ElementsAre(at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)));
  EXPECT_THAT(change->destroyed, IsEmpty());
  // The driver's own view: profile ids 9 (3g), 14 (2g), 19 (1g), each with one compute instance.
  EXPECT_EQ(fake.mig(0), "9@0/1,14@4/1,19@6/1");
  EXPECT_THAT(backend->gpus()[0].mig_instances(), ElementsAre(at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)));
  auto gpus = backend->gpus();
  for (const auto& d : gpus[0].mig_devices) EXPECT_FALSE(d.uuid.empty());
}

TEST(MigManagerNvml, KeepsWantedInstancesDestroysUnwantedOnesAndCreatesTheRest) {
  FakeNvml fake(kTwoThreeGs);
  auto backend = fake.open();
  MigManager manager(*backend);
  int creates = fake.calls("nvmlDeviceCreateGpuInstanceWithPlacement");
  int destroys = fake.calls("nvmlGpuInstanceDestroy");
  auto change = manager.apply(0, {at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)});
  ASSERT_TRUE(change) << change.error().to_string();
  EXPECT_THAT(change->destroyed, ElementsAre(at("3g.40gb", 4)));
  EXPECT_THAT(change->created, ElementsAre(at("2g.20gb", 4), at("1g.10gb", 6)));
  EXPECT_EQ(fake.calls("nvmlDeviceCreateGpuInstanceWithPlacement") - creates, 2);
  EXPECT_EQ(fake.calls("nvmlGpuInstanceDestroy") - destroys, 1);
  // The 3g at slot 0 was left alone: it is still the first GPU instance the driver made.
  EXPECT_EQ(fake.mig(0), "9@0/1,14@4/1,19@6/1");
}

TEST(MigManagerNvml, EmptyLayoutDestroysEveryInstanceWithItsComputeInstances) {
  FakeNvml fake(kTwoThreeGs);
  auto backend = fake.open();
  MigManager manager(*backend);
  auto change = manager.apply(0, {});
  ASSERT_TRUE(change) << change.error().to_string();
  EXPECT_THAT(change->destroyed, ElementsAre(at("3g.40gb", 0), at("3g.40gb", 4)));
  EXPECT_EQ(fake.mig(0), "");
  EXPECT_THAT(backend->gpus()[0].mig_devices, IsEmpty());
}

TEST(MigManagerNvml, IllegalLayoutIsRefusedBeforeAnyNvmlCall) {
  FakeNvml fake(kEmptyMigH100);
  auto backend = fake.open();
  MigManager manager(*backend);
  int before = fake.mig_calls() + fake.calls("nvmlDeviceGetComputeRunningProcesses_v3");

  auto bad_start = manager.apply(0, {at("3g.40gb", 2)});
  ASSERT_FALSE(bad_start);
  EXPECT_EQ(bad_start.error().to_string(),
            R"(gpus[0].mig_instances[0] "3g.40gb@2": 3g.40gb may start only at slot 0,4)");
  auto overlap = manager.apply(0, {at("3g.40gb", 0), at("2g.20gb", 2)});
  ASSERT_FALSE(overlap);
  EXPECT_EQ(overlap.error().field, "gpus[0].mig_instances[1]");
  EXPECT_THAT(overlap.error().message, HasSubstr("overlap"));
  auto beside_a_whole_gpu = manager.apply(0, {at("7g.80gb", 0), at("1g.10gb", 3)});
  ASSERT_FALSE(beside_a_whole_gpu);
  auto not_mig = manager.apply(1, {{0, 0}});
  ASSERT_FALSE(not_mig);
  EXPECT_THAT(not_mig.error().message, HasSubstr("is a l4, which does not support MIG"));

  EXPECT_EQ(fake.mig_calls() + fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), before);
  EXPECT_EQ(fake.mig(0), "");
}

TEST(MigManagerNvml, BusyGpuIsRefusedNamingItAndLeftAsItWas) {
  FakeNvml fake(kTwoThreeGs);
  auto backend = fake.open();
  fake.set_processes(0, 2);
  MigManager manager(*backend);
  int before = fake.calls("nvmlDeviceCreateGpuInstanceWithPlacement") + fake.calls("nvmlGpuInstanceDestroy");
  auto change = manager.apply(0, {at("7g.80gb", 0)});
  ASSERT_FALSE(change);
  EXPECT_EQ(change.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(change.error().message, HasSubstr(R"(GPU 0 ("GPU-h100-0") is busy: 2 compute process(es) running)"));
  EXPECT_EQ(fake.calls("nvmlDeviceCreateGpuInstanceWithPlacement") + fake.calls("nvmlGpuInstanceDestroy"), before);
  EXPECT_EQ(fake.mig(0), "9@0/1,9@4/1");
}

TEST(MigManagerNvml, LayoutAlreadyInPlaceIsANoOpEvenWhileJobsRun) {
  FakeNvml fake(kTwoThreeGs);
  auto backend = fake.open();
  fake.set_processes(0, 2);
  MigManager manager(*backend);
  auto change = manager.apply(0, {at("3g.40gb", 4), at("3g.40gb", 0)});
  ASSERT_TRUE(change) << change.error().to_string();
  EXPECT_TRUE(change->empty());
}

TEST(MigManagerNvml, MigModeOffIsAnErrorNamingTheGpuAndTheAgentDoesNotToggleIt) {
  FakeNvml fake(R"(gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-off mig=off)");
  auto backend = fake.open();
  MigManager manager(*backend);
  auto change = manager.apply(0, {at("1g.10gb", 0)});
  ASSERT_FALSE(change);
  EXPECT_EQ(change.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(change.error().message, HasSubstr(R"(GPU 0 ("GPU-off") has MIG mode off; enabling it needs a GPU reset)"));
  EXPECT_THAT(change.error().message, HasSubstr("nvidia-smi -i 0 -mig 1"));
  EXPECT_TRUE(manager.apply(0, {}));  // nothing wanted: nothing to refuse
}

TEST(MigManagerNvml, DriverFailurePartWayIsRolledBackAndSaysWhatWasDone) {
  FakeNvml fake(std::string(kTwoThreeGs) + "fail call=nvmlGpuInstanceCreateComputeInstance ret=23\n");
  auto backend = fake.open();
  MigManager manager(*backend);
  auto change = manager.apply(0, {at("3g.40gb", 0), at("2g.20gb", 4)});
  ASSERT_FALSE(change);
  EXPECT_THAT(change.error().message, HasSubstr("nvmlGpuInstanceCreateComputeInstance failed: Insufficient resources"));
  EXPECT_THAT(change.error().message, HasSubstr("done before this failure: destroyed 3g.40gb@4, created none"));
  // The GPU instance without a compute instance was taken back.
  EXPECT_EQ(fake.mig(0), "9@0/1");
  EXPECT_THAT(backend->gpus()[0].mig_instances(), ElementsAre(at("3g.40gb", 0)));
}

TEST(MigManagerNvml, OverlapTheManagerDidNotKnowAboutIsRefusedByTheDriver) {
  // The backend's view is stale (someone changed the GPU behind the agent's back): the driver's own
  // placement check still refuses, and the error carries NVML's reason.
  FakeNvml fake(kEmptyMigH100);
  auto backend = fake.open();
  ASSERT_TRUE(backend->create_mig_instance(0, at("7g.80gb", 0)));
  auto second = backend->create_mig_instance(0, at("1g.10gb", 3));
  ASSERT_FALSE(second);
  EXPECT_THAT(second.error().message,
              HasSubstr("nvmlDeviceCreateGpuInstanceWithPlacement failed: Insufficient resources (23)"));
}

TEST(MigManagerSimulated, LegalLayoutIsAppliedByDiffing) {
  auto backend = std::move(*SimulatedBackend::create("node-a", "h100x2:mig"));
  MigManager manager(*backend);
  auto first = manager.apply(1, {at("3g.40gb", 0), at("3g.40gb", 4)});
  ASSERT_TRUE(first) << first.error().to_string();
  auto second = manager.apply(1, {at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)});
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_THAT(second->destroyed, ElementsAre(at("3g.40gb", 4)));
  EXPECT_THAT(second->created, ElementsAre(at("2g.20gb", 4), at("1g.10gb", 6)));
  EXPECT_THAT(backend->gpus()[1].mig_instances(), ElementsAre(at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)));
  EXPECT_THAT(backend->gpus()[0].mig_instances(), IsEmpty());
}

TEST(MigManagerSimulated, RefusesWhatTheNvmlPathRefuses) {
  auto backend = std::move(*SimulatedBackend::create("node-a", "h100:mig,h100"));
  MigManager manager(*backend);
  auto illegal = manager.apply(0, {at("3g.40gb", 2)});
  ASSERT_FALSE(illegal);
  EXPECT_EQ(illegal.error().to_string(),
            R"(gpus[0].mig_instances[0] "3g.40gb@2": 3g.40gb may start only at slot 0,4)");

  ASSERT_TRUE(backend->set_compute_processes(0, 1));
  auto busy = manager.apply(0, {at("1g.10gb", 0)});
  ASSERT_FALSE(busy);
  EXPECT_THAT(busy.error().message, HasSubstr(R"(GPU 0 ("GPU-node-a-0") is busy)"));

  auto off = manager.apply(1, {at("1g.10gb", 0)});
  ASSERT_FALSE(off);
  EXPECT_THAT(off.error().message, HasSubstr(R"(GPU 1 ("GPU-node-a-1") has MIG mode off)"));

  auto missing = manager.apply(2, {});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(backend->gpus()[0].mig_instances(), IsEmpty());
}

}  // namespace
}  // namespace cnlab::agent
