// The NVML backend against the fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "agent/gpu/nvml_backend.h"
#include "model/node.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::FakeNvml;
using testing::LogCapture;

model::ModelId id(std::string_view name) { return *model::find_model(name); }
int profile(std::string_view model_name, std::string_view profile_name) {
  return *model::parse_mig_profile(id(model_name), profile_name, "profile");
}

constexpr const char* kThreeGpus = R"(
# an H100 with MIG off, an A100 40GB, an L4
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-h100-a memory_mib=81559 used_mib=2048 util=37 mig=off processes=2
gpu name="NVIDIA A100-SXM4-40GB" uuid=GPU-a100-b memory_mib=40960 mig=off
gpu name="NVIDIA L4" uuid=GPU-l4-c memory_mib=23034 util=unsupported ecc=unsupported
)";

TEST(NvmlBackend, InventoryListsEachGpuWithItsUuidCatalogModelAndReportedMemory) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  ASSERT_TRUE(backend->loaded()) << backend->load_error();
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(3));

  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].uuid, "GPU-h100-a");
  EXPECT_EQ(gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[0].model, id("h100"));
  EXPECT_EQ(gpus[0].memory_mib, 81559);
  EXPECT_FALSE(gpus[0].mig_enabled);
  EXPECT_TRUE(gpus[0].healthy);
  EXPECT_FALSE(gpus[0].simulated);

  EXPECT_EQ(gpus[1].uuid, "GPU-a100-b");
  EXPECT_EQ(gpus[1].model, id("a100m40"));
  EXPECT_EQ(gpus[2].uuid, "GPU-l4-c");
  EXPECT_EQ(gpus[2].model, id("l4"));
  EXPECT_EQ(gpus[2].memory_mib, 23034);
  EXPECT_EQ(gpus[2].device_index, 2);
  EXPECT_EQ(backend->kind(), "nvml");
}

TEST(NvmlBackend, MigInstancesOnTheGpuMapToCatalogProfilesAndStartSlots) {
  FakeNvml fake(R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-mig-0 mig=on
instance gpu=0 profile=2 start=0   # 3g.40gb
instance gpu=0 profile=1 start=4   # 2g.20gb
instance gpu=0 profile=0 start=6   # 1g.10gb
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-mig-1 mig=on
instance gpu=1 profile=9 start=2   # 1g.20gb, the double-memory 1g
)");
  auto backend = fake.open();
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(2));
  EXPECT_TRUE(gpus[0].mig_enabled);
  EXPECT_THAT(gpus[0].mig_instances(),
              ElementsAre(model::MigInstance{profile("h100", "3g.40gb"), 0},
                          model::MigInstance{profile("h100", "2g.20gb"), 4},
                          model::MigInstance{profile("h100", "1g.10gb"), 6}));
  EXPECT_THAT(gpus[1].mig_instances(), ElementsAre(model::MigInstance{profile("h100", "1g.20gb"), 2}));
  // Each instance carries the UUID a job is given in CUDA_VISIBLE_DEVICES.
  for (const auto& d : gpus[0].mig_devices) EXPECT_THAT(d.uuid, ::testing::StartsWith("MIG-mig-0-"));
  EXPECT_NE(gpus[0].mig_devices[0].uuid, gpus[0].mig_devices[1].uuid);
}

TEST(NvmlBackend, UnknownDeviceNameIsSkippedWithOneLogLineAndLaterGpusKeepDenseIndices) {
  FakeNvml fake(R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-known-0
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-unknown-1 memory_mib=24564
gpu name="NVIDIA L4" uuid=GPU-known-2 memory_mib=23034
)");
  LogCapture logs;
  auto backend = fake.open();
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(2));
  EXPECT_EQ(gpus[1].uuid, "GPU-known-2");
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].device_index, 2);
  auto skipped = logs.matching("GPU-unknown-1");
  ASSERT_THAT(skipped, SizeIs(1));
  EXPECT_THAT(skipped[0], HasSubstr("gpu skipped"));
  EXPECT_THAT(skipped[0], HasSubstr("NVIDIA GeForce RTX 4090"));
  EXPECT_THAT(skipped[0], HasSubstr("known models: a10,"));
  // What the node reports validates: indices 0..n-1.
  model::Node node;
  node.meta.name = "gpu-node";
  node.gpus = to_model_gpus(*backend);
  EXPECT_TRUE(model::validate(node));
}

TEST(NvmlBackend, MissingLibraryGivesZeroGpusAndExactlyOneLogLine) {
  LogCapture logs;
  auto backend = NvmlBackend::open({.library = "/nonexistent/cnlab-test/libnvidia-ml.so.1"});
  EXPECT_FALSE(backend->loaded());
  EXPECT_THAT(backend->load_error(), HasSubstr("/nonexistent/cnlab-test/libnvidia-ml.so.1"));
  EXPECT_THAT(backend->gpus(), IsEmpty());
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  auto usage = backend->usage(0);
  ASSERT_FALSE(usage);
  EXPECT_EQ(usage.error().code, ErrorCode::kNotFound);
  auto lines = logs.lines();
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], HasSubstr("gpu backend unavailable backend=nvml"));
  EXPECT_THAT(lines[0], HasSubstr("gpus=0"));
}

TEST(NvmlBackend, FailingInitGivesZeroGpusAndExactlyOneLogLine) {
  FakeNvml fake(R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-never-seen
fail call=nvmlInit_v2 ret=9
)");
  LogCapture logs;
  auto backend = fake.open();
  EXPECT_FALSE(backend->loaded());
  EXPECT_EQ(backend->load_error(), "nvmlInit_v2 failed: Driver Not Loaded (9)");
  EXPECT_THAT(backend->gpus(), IsEmpty());
  auto lines = logs.lines();
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], HasSubstr("nvmlInit_v2 failed: Driver Not Loaded (9)"));
}

TEST(NvmlBackend, DeviceWhoseHandleCannotBeReadIsSkippedAndTheOthersStay) {
  FakeNvml fake(std::string(kThreeGpus) + "fail call=nvmlDeviceGetHandleByIndex_v2 gpu=0 ret=15\n");
  LogCapture logs;
  auto backend = fake.open();
  ASSERT_TRUE(backend->loaded());
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(2));
  EXPECT_EQ(gpus[0].uuid, "GPU-a100-b");
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].device_index, 1);
  EXPECT_THAT(logs.matching("device_index=0 why=\"nvmlDeviceGetHandleByIndex_v2 failed: GPU is lost (15)\""),
              SizeIs(1));
}

TEST(NvmlBackend, FailingMemoryQueryMarksTheGpuUnhealthyWithTheCatalogMemory) {
  FakeNvml fake(std::string(kThreeGpus) + "fail call=nvmlDeviceGetMemoryInfo gpu=2 ret=15\n");
  auto backend = fake.open();
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(3));
  EXPECT_TRUE(gpus[0].healthy);
  EXPECT_FALSE(gpus[2].healthy);
  EXPECT_EQ(gpus[2].unhealthy_reason, "NvmlQueryFailed");
  EXPECT_EQ(gpus[2].memory_mib, model::gpu_model(id("l4")).memory_mib);
  auto usage = backend->usage(2);
  ASSERT_FALSE(usage);
  EXPECT_THAT(usage.error().message, HasSubstr("nvmlDeviceGetMemoryInfo failed: GPU is lost (15)"));
}

TEST(NvmlBackend, UsageReportsMemoryUtilizationAndProcessesAndNoUtilizationWhereUnsupported) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  auto h100 = backend->usage(0);
  ASSERT_TRUE(h100) << h100.error().to_string();
  EXPECT_EQ(h100->memory_total_mib, 81559);
  EXPECT_EQ(h100->memory_used_mib, 2048);
  EXPECT_EQ(h100->utilization_percent, 37);
  EXPECT_EQ(h100->compute_processes, 2);
  auto l4 = backend->usage(2);
  ASSERT_TRUE(l4);
  EXPECT_EQ(l4->utilization_percent, std::nullopt);
  EXPECT_EQ(l4->compute_processes, 0);
  EXPECT_EQ(backend->usage(3).error().code, ErrorCode::kNotFound);
}

TEST(NvmlBackend, XidCriticalErrorMakesTheGpuUnhealthyUntilRestart) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  fake.inject_xid(1, 79);
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{1, "GPU-a100-b", "XidError 79"}));
  EXPECT_THAT(backend->poll_health(), IsEmpty());  // reported once
  auto gpus = backend->gpus();
  EXPECT_FALSE(gpus[1].healthy);
  EXPECT_EQ(gpus[1].unhealthy_reason, "XidError 79");
  EXPECT_TRUE(gpus[0].healthy);
  EXPECT_FALSE(to_model_gpus(*backend)[1].healthy);
}

TEST(NvmlBackend, ApplicationXidLeavesTheGpuHealthy) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  fake.inject_xid(0, 13);
  fake.inject_xid(0, 43);
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  EXPECT_TRUE(backend->gpus()[0].healthy);
}

TEST(NvmlBackend, XidPendingAtStartIsSeenWhenTheBackendOpens) {
  FakeNvml fake(std::string(kThreeGpus) + "xid gpu=0 value=48\n");
  auto backend = fake.open();
  EXPECT_FALSE(backend->gpus()[0].healthy);
  EXPECT_EQ(backend->gpus()[0].unhealthy_reason, "XidError 48");
}

TEST(NvmlBackend, UncorrectableEccCountMakesTheGpuUnhealthy) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  fake.set_ecc_count(0, 2);
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{0, "GPU-h100-a", "EccUncorrectable"}));
  EXPECT_FALSE(backend->gpus()[0].healthy);
}

TEST(NvmlBackend, DoubleBitEccEventMakesTheGpuUnhealthy) {
  FakeNvml fake(kThreeGpus);
  auto backend = fake.open();
  fake.inject_double_bit_ecc(1);
  EXPECT_THAT(backend->poll_health(), ElementsAre(HealthEvent{1, "GPU-a100-b", "EccUncorrectable"}));
}

TEST(NvmlBackend, EccAndEventsNotSupportedAreNotErrorsAndEccIsNotAskedAgain) {
  FakeNvml fake(R"(gpu name="NVIDIA L4" uuid=GPU-plain ecc=unsupported events=0)");
  LogCapture logs;
  auto backend = fake.open();
  int before = fake.calls("nvmlDeviceGetTotalEccErrors");
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  EXPECT_THAT(backend->poll_health(), IsEmpty());
  EXPECT_TRUE(backend->gpus()[0].healthy);
  // NOT_SUPPORTED at open() ends the questions: no call in the two polls.
  EXPECT_EQ(fake.calls("nvmlDeviceGetTotalEccErrors"), before);
  EXPECT_THAT(logs.matching("warn"), IsEmpty());
}

TEST(NvmlBackend, ModelGpusOfAMigNodeValidate) {
  FakeNvml fake(R"(
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a mig=on
instance gpu=0 profile=3 start=0   # 4g.40gb
instance gpu=0 profile=2 start=4   # 3g.40gb
gpu name="NVIDIA A100 80GB PCIe" uuid=GPU-b mig=off
)");
  auto backend = fake.open();
  auto gpus = to_model_gpus(*backend);
  ASSERT_THAT(gpus, SizeIs(2));
  EXPECT_EQ(gpus[0].model, id("a100m80"));
  EXPECT_EQ(gpus[1].model, id("a100m80"));
  EXPECT_TRUE(gpus[0].mig_enabled);
  EXPECT_THAT(gpus[0].mig_instances, SizeIs(2));
  EXPECT_FALSE(gpus[0].simulated);
  model::Node node;
  node.meta.name = "gpu-node";
  node.gpus = gpus;
  auto valid = model::validate(node);
  EXPECT_TRUE(valid) << valid.error().to_string();
}

TEST(NvmlBackend, InstancesOfProfilesTheAgentDoesNotManageMarkTheGpuUnhealthy) {
  FakeNvml fake(R"(
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-me mig=on
instance gpu=0 profile=7 start=3   # 1g.10gb+me
)");
  LogCapture logs;
  auto backend = fake.open();
  auto gpus = backend->gpus();
  ASSERT_THAT(gpus, SizeIs(1));
  EXPECT_FALSE(gpus[0].healthy);
  EXPECT_THAT(logs.matching("does not manage (NVML profile id 20)"), SizeIs(1));
}

}  // namespace
}  // namespace cnlab::agent
