// cnlab-cuda-checkpoint's command line and GPU UUID parsing (src/agent/cuda_checkpoint_tool/
// command_line.h), without a driver: what the agent passes is understood, and every bad input gets
// one line naming the option, the value and what is allowed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/cuda_checkpoint_tool/command_line.h"

namespace cnlab::cuda_checkpoint_tool {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr const char* kGpuA = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";
constexpr const char* kGpuB = "GPU-fa4ec0da-c0de-4000-8000-000000000001";

Uuid bytes_of_a() {
  return {0x3f, 0x1c, 0x0a, 0x2b, 0x9d, 0x4e, 0x4c, 0x1a, 0x8e, 0x7f, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
}

Parsed<Command> parse(std::vector<std::string> args) { return parse_command_line(args); }

std::string error_of(std::vector<std::string> args) {
  auto parsed = parse_command_line(args);
  EXPECT_FALSE(parsed) << "parsed without an error";
  return parsed.error;
}

TEST(CudaCheckpointToolUuid, NvmlTextIsItsSixteenBytesInOrder) {
  auto uuid = parse_uuid(kGpuA);
  ASSERT_TRUE(uuid);
  EXPECT_EQ(*uuid, bytes_of_a());
}

TEST(CudaCheckpointToolUuid, UpperCaseHexReadsTheSameAndPrintsLowerCase) {
  auto uuid = parse_uuid("GPU-3F1C0A2B-9D4E-4C1A-8E7F-0123456789AB");
  ASSERT_TRUE(uuid);
  EXPECT_EQ(*uuid, bytes_of_a());
  EXPECT_EQ(format_uuid(*uuid), kGpuA);
}

TEST(CudaCheckpointToolUuid, FormatAndParseRoundTrip) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<unsigned char>(0xF0 + i);
  EXPECT_EQ(format_uuid(u), "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff");
  EXPECT_EQ(parse_uuid(format_uuid(u)), u);
}

TEST(CudaCheckpointToolUuid, AnythingButTheCanonicalFormIsRefused) {
  for (const char* bad : {
           "",
           "3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab",      // no GPU- prefix
           "gpu-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab",  // lower-case prefix
           "MIG-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab",  // a MIG instance, not a GPU
           "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789a",   // one digit short
           "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789abc", // one digit long
           "GPU-3f1c0a2b9-d4e-4c1a-8e7f-0123456789ab",  // a dash out of place
           "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ag",  // not hex
           "GPU-3f1c0a2b-9d4e-4c1a-8e7f-01234567 9ab",
       }) {
    EXPECT_FALSE(parse_uuid(bad)) << bad;
  }
}

TEST(CudaCheckpointToolDeviceMap, PairsEachOldGpuWithItsNewOneInOrder) {
  auto map = parse_device_map(std::string(kGpuA) + "=" + kGpuB + "," + kGpuB + "=" + kGpuA);
  ASSERT_TRUE(map) << map.error;
  ASSERT_EQ(map->size(), 2u);
  EXPECT_EQ(format_uuid((*map)[0].from), kGpuA);
  EXPECT_EQ(format_uuid((*map)[0].to), kGpuB);
  EXPECT_EQ(format_uuid((*map)[1].from), kGpuB);
  EXPECT_EQ(format_uuid((*map)[1].to), kGpuA);
}

TEST(CudaCheckpointToolDeviceMap, AMalformedMapSaysWhichPartIsWrong) {
  EXPECT_THAT(parse_device_map("").error, HasSubstr("expected OLD=NEW"));
  EXPECT_THAT(parse_device_map(kGpuA).error, AllOf(HasSubstr(kGpuA), HasSubstr("has no \"=\"")));
  EXPECT_THAT(parse_device_map(std::string(kGpuA) + "=GPU-12").error,
              AllOf(HasSubstr("\"GPU-12\" is not a GPU UUID"), HasSubstr("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")));
  EXPECT_THAT(parse_device_map(std::string(kGpuA) + "=" + kGpuB + ",").error, HasSubstr("\"\" has no \"=\""));
  EXPECT_THAT(parse_device_map(std::string(kGpuA) + "=" + kGpuB + "," + kGpuA + "=" + kGpuA).error,
              HasSubstr("is mapped twice"));
}

TEST(CudaCheckpointToolCommandLine, GetStateNeedsOnlyThePid) {
  auto c = parse({"--get-state", "--pid", "4242"});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->operation, Operation::kGetState);
  EXPECT_EQ(c->pid, 4242);
}

TEST(CudaCheckpointToolCommandLine, CheckStandsAlone) {
  auto c = parse({"--check"});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->operation, Operation::kCheck);
  auto mixed = parse({"--check", "--get-state", "--pid", "1"});
  ASSERT_FALSE(mixed);
  EXPECT_THAT(mixed.error, HasSubstr("--check takes no other option"));
}

TEST(CudaCheckpointToolCommandLine, TheAgentsLockCarriesItsTimeout) {
  // What src/agent/runtime/cuda_checkpoint.cpp runs.
  auto c = parse({"--action", "lock", "--pid", "17", "--timeout", "5000"});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->operation, Operation::kAction);
  EXPECT_EQ(c->action, Action::kLock);
  EXPECT_EQ(c->pid, 17);
  EXPECT_EQ(c->timeout_ms, 5000u);
}

TEST(CudaCheckpointToolCommandLine, ALockWithoutTimeoutWaitsWithoutLimit) {
  auto c = parse({"--action", "lock", "--pid", "17"});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->timeout_ms, 0u);
}

TEST(CudaCheckpointToolCommandLine, EachActionIsKnownByItsName) {
  for (Action a : {Action::kLock, Action::kCheckpoint, Action::kRestore, Action::kUnlock}) {
    auto c = parse({"--action", action_name(a), "--pid", "1"});
    ASSERT_TRUE(c) << c.error;
    EXPECT_EQ(c->action, a);
  }
}

TEST(CudaCheckpointToolCommandLine, ARestoreCarriesItsDeviceMap) {
  auto c = parse({"--action", "restore", "--pid", "9", "--device-map", std::string(kGpuA) + "=" + kGpuB});
  ASSERT_TRUE(c) << c.error;
  ASSERT_EQ(c->device_map.size(), 1u);
  EXPECT_EQ(c->device_map[0].from, bytes_of_a());
  EXPECT_EQ(format_uuid(c->device_map[0].to), kGpuB);
}

TEST(CudaCheckpointToolCommandLine, OptionsTakeTheirValueAfterAnEqualsSignToo) {
  auto c = parse({"--action=lock", "--pid=12", "--timeout=300"});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->action, Action::kLock);
  EXPECT_EQ(c->pid, 12);
  EXPECT_EQ(c->timeout_ms, 300u);
}

TEST(CudaCheckpointToolCommandLine, ToggleTakesTheLocksTimeoutAndTheRestoresMap) {
  auto c = parse({"--toggle", "--pid", "3", "--timeout", "10", "--device-map", std::string(kGpuA) + "=" + kGpuB});
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ(c->operation, Operation::kToggle);
  EXPECT_EQ(c->timeout_ms, 10u);
  EXPECT_EQ(c->device_map.size(), 1u);
}

TEST(CudaCheckpointToolCommandLine, HelpNeedsNothingElse) {
  for (const char* help : {"--help", "-h"}) {
    auto c = parse({help});
    ASSERT_TRUE(c) << c.error;
    EXPECT_EQ(c->operation, Operation::kHelp);
  }
  EXPECT_THAT(usage(), AllOf(HasSubstr("--get-state"), HasSubstr("--toggle"), HasSubstr("--device-map"), HasSubstr("r570")));
}

TEST(CudaCheckpointToolCommandLine, AnUnknownOptionIsNamedWithTheAllowedOnes) {
  EXPECT_THAT(error_of({"--action", "lock", "--pid", "1", "--frobnicate"}),
              AllOf(HasSubstr("unknown option \"--frobnicate\""), HasSubstr("allowed: --get-state, --action, --toggle, --pid")));
  EXPECT_THAT(error_of({"lock"}), HasSubstr("unknown option \"lock\""));
}

TEST(CudaCheckpointToolCommandLine, APidIsRequired) {
  EXPECT_THAT(error_of({"--get-state"}), HasSubstr("--pid is required"));
}

TEST(CudaCheckpointToolCommandLine, APidMustBeAPositiveWholeNumber) {
  for (const char* bad : {"0", "-5", "abc", "12x", "1.5", "", "2147483648", "99999999999999999999999"}) {
    EXPECT_THAT(error_of({"--get-state", std::string("--pid=") + bad}),
                AllOf(HasSubstr(std::string("--pid \"") + bad + "\""), HasSubstr("expected a whole number from 1 to 2147483647")))
        << bad;
  }
  auto largest = parse({"--get-state", "--pid", "2147483647"});
  ASSERT_TRUE(largest) << largest.error;
  EXPECT_EQ(largest->pid, 2147483647);
}

TEST(CudaCheckpointToolCommandLine, AnOptionWithoutItsValueSaysWhatItNeeds) {
  EXPECT_THAT(error_of({"--get-state", "--pid"}), HasSubstr("--pid needs a value: a process id"));
  // The next option is not taken for the value.
  EXPECT_THAT(error_of({"--pid", "--get-state"}), HasSubstr("--pid needs a value"));
  EXPECT_THAT(error_of({"--pid", "1", "--action"}), HasSubstr("--action needs a value: lock, checkpoint, restore or unlock"));
}

TEST(CudaCheckpointToolCommandLine, AnUnknownActionIsNamedWithTheKnownOnes) {
  EXPECT_THAT(error_of({"--action", "freeze", "--pid", "1"}),
              AllOf(HasSubstr("--action \"freeze\": unknown action"), HasSubstr("allowed: lock, checkpoint, restore, unlock")));
}

TEST(CudaCheckpointToolCommandLine, ExactlyOneOperationIsGiven) {
  EXPECT_THAT(error_of({"--pid", "1"}), HasSubstr("nothing to do"));
  EXPECT_THAT(error_of({"--get-state", "--toggle", "--pid", "1"}), HasSubstr("--get-state and --toggle cannot be combined"));
  EXPECT_THAT(error_of({"--get-state", "--action", "lock", "--pid", "1"}), HasSubstr("--get-state and --action cannot be combined"));
  EXPECT_THAT(error_of({"--get-state", "--get-state", "--pid", "1"}), HasSubstr("--get-state is given twice"));
  EXPECT_THAT(error_of({"--get-state", "--pid", "1", "--pid", "2"}), HasSubstr("--pid is given twice"));
}

TEST(CudaCheckpointToolCommandLine, ATimeoutIsWholeMillisecondsForALockOnly) {
  EXPECT_THAT(error_of({"--action", "lock", "--pid", "1", "--timeout", "1.5"}),
              AllOf(HasSubstr("--timeout \"1.5\": not a number of milliseconds"), HasSubstr("0 (no limit)")));
  EXPECT_THAT(error_of({"--action", "lock", "--pid", "1", "--timeout", "4294967296"}), HasSubstr("--timeout \"4294967296\""));
  EXPECT_THAT(error_of({"--action", "checkpoint", "--pid", "1", "--timeout", "5"}),
              HasSubstr("--timeout applies only to --action lock and --toggle, not to --action checkpoint"));
  EXPECT_THAT(error_of({"--get-state", "--pid", "1", "--timeout", "5"}), HasSubstr("not to --get-state"));
}

TEST(CudaCheckpointToolCommandLine, ADeviceMapIsForARestoreOnlyAndMustBeWellFormed) {
  const std::string map = std::string(kGpuA) + "=" + kGpuB;
  EXPECT_THAT(error_of({"--action", "unlock", "--pid", "1", "--device-map", map}),
              HasSubstr("--device-map applies only to --action restore and --toggle, not to --action unlock"));
  EXPECT_THAT(error_of({"--action", "restore", "--pid", "1", "--device-map", std::string(kGpuA) + "=GPU-nothex"}),
              AllOf(HasSubstr("--device-map \"" + std::string(kGpuA) + "=GPU-nothex\""), HasSubstr("\"GPU-nothex\" is not a GPU UUID")));
}

TEST(CudaCheckpointToolCommandLine, ErrorsAreOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"--get-state"}, {"--get-state", "--pid", "x"}, {"--action", "x", "--pid", "1"},
           {"--action", "restore", "--pid", "1", "--device-map", "a=b"}}) {
    const std::string e = error_of(args);
    EXPECT_THAT(e, Not(IsEmpty()));
    EXPECT_THAT(e, Not(HasSubstr("\n")));
  }
}

}  // namespace
}  // namespace cnlab::cuda_checkpoint_tool
