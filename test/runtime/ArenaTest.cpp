//===- ArenaTest.cpp - Arena allocation and peak tracking -----------------===//

#include "runtime/Arena.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace sharc::rt;

TEST(Arena, AlignedZeroedAndAddressable) {
  Arena arena(1000, 512);
  EXPECT_EQ(arena.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.base()) % 512, 0u);
  EXPECT_EQ(arena.at(0), arena.base());
  EXPECT_EQ(arena.at(123), arena.base() + 123);
  EXPECT_EQ(arena.at(1000), arena.base() + 1000);
  for (size_t i = 0; i < 1000; ++i)
    ASSERT_EQ(arena.base()[i], 0) << i;
  arena.base()[999] = 1;
}

TEST(Arena, PeakIsHighestDeclaredEnd) {
  Arena arena(4096);
  EXPECT_EQ(arena.peak(), 0u);
  arena.touch(100, 50);
  EXPECT_EQ(arena.peak(), 150u);
  arena.touch(0, 10); // lower region: peak unchanged
  EXPECT_EQ(arena.peak(), 150u);
  arena.touch(1000, 96);
  EXPECT_EQ(arena.peak(), 1096u);
  arena.touch(4000, 96); // ends exactly at the size
  EXPECT_EQ(arena.peak(), 4096u);
  arena.touch(4096, 0);
  EXPECT_EQ(arena.peak(), 4096u);
}

TEST(Arena, EmptyArena) {
  Arena arena(0);
  EXPECT_NE(arena.base(), nullptr);
  EXPECT_EQ(arena.size(), 0u);
  arena.touch(0, 0);
  EXPECT_EQ(arena.peak(), 0u);
}
