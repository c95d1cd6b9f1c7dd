#include "agent/gpu/device_names.h"

#include <gtest/gtest.h>

namespace cnlab::agent {
namespace {

std::string model_of(std::string_view name, int64_t memory_mib = 0) {
  auto id = model_for_device_name(name, memory_mib);
  return id ? std::string(model::gpu_model(*id).name) : "<none>";
}

TEST(DeviceNames, NvmlNamesOfCatalogModelsMapToThem) {
  EXPECT_EQ(model_of("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(model_of("NVIDIA H100 PCIe"), "h100");
  EXPECT_EQ(model_of("NVIDIA H100 NVL"), "h100nvl");
  EXPECT_EQ(model_of("NVIDIA H200"), "h200");
  EXPECT_EQ(model_of("NVIDIA A100-SXM4-40GB"), "a100m40");
  EXPECT_EQ(model_of("NVIDIA A100-SXM4-80GB"), "a100m80");
  EXPECT_EQ(model_of("NVIDIA A100 80GB PCIe"), "a100m80");
  EXPECT_EQ(model_of("A100-PCIE-40GB"), "a100m40");
  EXPECT_EQ(model_of("NVIDIA A10"), "a10");
  EXPECT_EQ(model_of("NVIDIA L4"), "l4");
  EXPECT_EQ(model_of("NVIDIA L40S"), "l40s");
  EXPECT_EQ(model_of("Tesla T4"), "t4");
  EXPECT_EQ(model_of("Tesla P100-PCIE-16GB"), "p100");
  EXPECT_EQ(model_of("Tesla V100-SXM2-16GB"), "v100m16");
  EXPECT_EQ(model_of("Tesla V100S-PCIE-32GB"), "v100m32");
  EXPECT_EQ(model_of("NVIDIA RTX 6000 Ada Generation"), "rtx6000ada");
}

TEST(DeviceNames, MemoryTellsApartSizesTheNameLeavesOpen) {
  EXPECT_EQ(model_of("NVIDIA A100-PCIE", 81920), "a100m80");
  EXPECT_EQ(model_of("NVIDIA A100-PCIE", 40536), "a100m40");
  EXPECT_EQ(model_of("Tesla V100-SXM2", 32510), "v100m32");
  EXPECT_EQ(model_of("Tesla V100-SXM2", 16160), "v100m16");
}

TEST(DeviceNames, ProductsTheCatalogLacksAreNotGuessed) {
  EXPECT_EQ(model_of("NVIDIA GeForce RTX 4090"), "<none>");
  EXPECT_EQ(model_of("NVIDIA A10G"), "<none>");
  EXPECT_EQ(model_of("NVIDIA L40"), "<none>");
  EXPECT_EQ(model_of("NVIDIA A30"), "<none>");
  EXPECT_EQ(model_of("NVIDIA RTX A6000"), "<none>");
  EXPECT_EQ(model_of(""), "<none>");
}

}  // namespace
}  // namespace cnlab::agent
