#include "vgpu/config.h"

#include <gmock/gmock.h>

#include <map>
#include <string>

namespace cnlab::vgpu {
namespace {

using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

Config read(const Env& env) {
  return read_config(
      [](const char* name, void* context) -> const char* {
        const auto& e = *static_cast<const Env*>(context);
        auto it = e.find(name);
        return it == e.end() ? nullptr : it->second.c_str();
      },
      const_cast<Env*>(&env));
}

TEST(ParseBytes, TakesBinaryAndDecimalSuffixesAndPlainBytes) {
  uint64_t b = 0;
  EXPECT_TRUE(parse_bytes("20Gi", &b));
  EXPECT_EQ(b, 20ull << 30);
  EXPECT_TRUE(parse_bytes("512Mi", &b));
  EXPECT_EQ(b, 512ull << 20);
  EXPECT_TRUE(parse_bytes("20G", &b));
  EXPECT_EQ(b, 20'000'000'000ull);
  EXPECT_TRUE(parse_bytes("3GB", &b));
  EXPECT_EQ(b, 3'000'000'000ull);
  EXPECT_TRUE(parse_bytes("1073741824", &b));
  EXPECT_EQ(b, 1ull << 30);
}

TEST(ParseBytes, RefusesWhatIsNotASize) {
  uint64_t b = 0;
  for (const char* bad : {"", "Gi", "-1Gi", "1.5Gi", "20gb", "20 Gi", "20Gix", "99999999999999999999", "20000000000Ti"}) {
    EXPECT_FALSE(parse_bytes(bad, &b)) << bad;
  }
}

TEST(VgpuConfig, StandaloneReadsTheQuotaTheShareAndTheTenant) {
  Config c = read({{"CNLAB_VGPU_MEMORY_LIMIT", "20Gi"}, {"CNLAB_VGPU_COMPUTE_SHARE", "30"}, {"CNLAB_VGPU_TENANT", "slurm-42"}});
  EXPECT_EQ(c.error[0], '\0') << c.error;
  EXPECT_FALSE(c.agent);
  EXPECT_EQ(c.memory_limit, 20ull << 30);
  EXPECT_EQ(c.compute_share, 30u);
  EXPECT_STREQ(c.tenant, "slurm-42");
  EXPECT_STREQ(c.dir, "/dev/shm/cnlab-vgpu");
  EXPECT_STREQ(c.cuda_library, "libcuda.so.1");
}

TEST(VgpuConfig, WithoutATenantAProcessIsItsOwn) {
  Config c = read({});
  EXPECT_EQ(c.error[0], '\0');
  EXPECT_THAT(c.tenant, HasSubstr("pid-"));
  EXPECT_EQ(c.memory_limit, kUnlimited);
  EXPECT_EQ(c.compute_share, 100u);
}

TEST(VgpuConfig, ABadValueNamesTheVariableTheValueAndWhatIsAllowed) {
  Config c = read({{"CNLAB_VGPU_MEMORY_LIMIT", "lots"}});
  EXPECT_THAT(c.error, HasSubstr("CNLAB_VGPU_MEMORY_LIMIT=\"lots\""));
  EXPECT_THAT(c.error, HasSubstr("20Gi"));
  EXPECT_THAT(read({{"CNLAB_VGPU_COMPUTE_SHARE", "0"}}).error, HasSubstr("1 to 100"));
  EXPECT_THAT(read({{"CNLAB_VGPU_COMPUTE_SHARE", "101"}}).error, HasSubstr("CNLAB_VGPU_COMPUTE_SHARE=\"101\""));
  EXPECT_THAT(read({{"CNLAB_VGPU_TENANT", "../etc"}}).error, HasSubstr("CNLAB_VGPU_TENANT=\"../etc\""));
  EXPECT_THAT(read({{"CNLAB_VGPU_LOG", "loud"}}).error, HasSubstr("error, info or debug"));
}

TEST(VgpuConfig, TheAgentsModeNeedsItsDirectoryAndTenantAndRefusesStandaloneLimits) {
  Config ok = read({{"CNLAB_VGPU_REGION", "/run/cnlab/limits"}, {"CNLAB_VGPU_DIR", "/run/cnlab"}, {"CNLAB_VGPU_TENANT", "train-1"}});
  EXPECT_EQ(ok.error[0], '\0') << ok.error;
  EXPECT_TRUE(ok.agent);
  EXPECT_THAT(read({{"CNLAB_VGPU_REGION", "/r"}, {"CNLAB_VGPU_TENANT", "t"}}).error, HasSubstr("CNLAB_VGPU_DIR"));
  EXPECT_THAT(read({{"CNLAB_VGPU_REGION", "/r"}, {"CNLAB_VGPU_DIR", "/d"}}).error, HasSubstr("CNLAB_VGPU_TENANT"));
  Config both = read({{"CNLAB_VGPU_REGION", "/r"}, {"CNLAB_VGPU_DIR", "/d"}, {"CNLAB_VGPU_TENANT", "t"},
                      {"CNLAB_VGPU_MEMORY_LIMIT", "1Gi"}});
  EXPECT_THAT(both.error, HasSubstr("not allowed with CNLAB_VGPU_REGION"));
}

}  // namespace
}  // namespace cnlab::vgpu
