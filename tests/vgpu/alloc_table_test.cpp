#include "vgpu/alloc_table.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace cnlab::vgpu {
namespace {

TEST(AllocTable, RemembersWhatEachHandleWasChargedUntilRemoved) {
  AllocTable table;
  table.insert(AllocKind::kDevicePtr, 0x7f0000200000, {4096, 1});
  table.insert(AllocKind::kArray, 0x7f0000200000, {65536, 2});  // same number, another kind
  AllocInfo info;
  ASSERT_TRUE(table.find(AllocKind::kDevicePtr, 0x7f0000200000, &info));
  EXPECT_EQ(info.bytes, 4096u);
  EXPECT_EQ(info.gpu, 1);
  ASSERT_TRUE(table.remove(AllocKind::kArray, 0x7f0000200000, &info));
  EXPECT_EQ(info.bytes, 65536u);
  EXPECT_EQ(info.gpu, 2);
  EXPECT_FALSE(table.remove(AllocKind::kArray, 0x7f0000200000, &info));  // a double free
  EXPECT_TRUE(table.find(AllocKind::kDevicePtr, 0x7f0000200000, &info));
  EXPECT_EQ(table.size(), 1u);
}

TEST(AllocTable, AnAddressHandedOutAgainAfterItsFreeIsANewEntry) {
  AllocTable table;
  for (int round = 0; round < 1000; ++round) {
    table.insert(AllocKind::kDevicePtr, 0x1000, {static_cast<uint64_t>(round), 0});
    AllocInfo info;
    ASSERT_TRUE(table.remove(AllocKind::kDevicePtr, 0x1000, &info));
    ASSERT_EQ(info.bytes, static_cast<uint64_t>(round));
  }
  EXPECT_EQ(table.size(), 0u);
}

TEST(AllocTable, ManyThreadsAllocatingAndFreingLoseNothing) {
  AllocTable table;
  constexpr int kThreads = 8, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        uint64_t handle = (uint64_t{1} << 40) + (uint64_t(t) << 24) + uint64_t(i) * 512;
        table.insert(AllocKind::kDevicePtr, handle, {uint64_t(i), t});
        if (i % 3 != 0) {
          AllocInfo info;
          ASSERT_TRUE(table.remove(AllocKind::kDevicePtr, handle, &info));
          ASSERT_EQ(info.bytes, uint64_t(i));
          ASSERT_EQ(info.gpu, t);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t kept = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRounds; i += 3) {
      AllocInfo info;
      ASSERT_TRUE(table.find(AllocKind::kDevicePtr, (uint64_t{1} << 40) + (uint64_t(t) << 24) + uint64_t(i) * 512, &info));
      ++kept;
    }
  }
  EXPECT_EQ(table.size(), kept);
}

}  // namespace
}  // namespace cnlab::vgpu
