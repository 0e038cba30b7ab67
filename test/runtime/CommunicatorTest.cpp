//===- CommunicatorTest.cpp - Collectives against hand-computed results ---===//
//
// Runs on every rank; each rank's input is a known function of (rank, index),
// so every expected result is computed here from those inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/Communicator.h"
#include "runtime/Float16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace sharc::rt;

namespace {

/// The value rank `r` contributes at index `i` (integers: exact sums).
double input(int r, size_t i) { return 1000.0 * (r + 1) + double(i); }

/// Work for the caller while started collectives run.
double computeMeanwhile() {
  double busy = 0;
  for (int i = 0; i < 100000; ++i)
    busy += std::sqrt(double(i));
  return busy;
}

} // namespace

TEST(MpiCommunicator, RankAndSize) {
  MpiCommunicator comm;
  EXPECT_GE(comm.size(), 1);
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.size());
  comm.barrier();
}

TEST(MpiCommunicator, AllReduceSumF32UnevenCount) {
  MpiCommunicator comm;
  int n = comm.size();
  // 7 elements: not a multiple of 2 or 4, so slices are uneven.
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
    std::vector<float> buffer(count);
    for (size_t i = 0; i < count; ++i)
      buffer[i] = float(input(comm.rank(), i));
    comm.allReduce(buffer.data(), count, DType::f32, ReduceOp::sum);
    for (size_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r)
        expected += input(r, i);
      ASSERT_EQ(buffer[i], float(expected)) << "count " << count << " i " << i;
    }
  }
}

TEST(MpiCommunicator, AllReduceMaxF64AndSumI64) {
  MpiCommunicator comm;
  int n = comm.size();
  std::vector<double> values(9);
  std::vector<int64_t> integers(9);
  for (size_t i = 0; i < 9; ++i) {
    // Rank (i mod n) holds the maximum of element i.
    values[i] = comm.rank() == int(i % n) ? 100.0 + i : -double(comm.rank());
    integers[i] = (int64_t(1) << 40) * (comm.rank() + 1) + int64_t(i);
  }
  comm.allReduce(values.data(), 9, DType::f64, ReduceOp::max);
  comm.allReduce(integers.data(), 9, DType::i64, ReduceOp::sum);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(values[i], 100.0 + i);
    int64_t expected = 0;
    for (int r = 0; r < n; ++r)
      expected += (int64_t(1) << 40) * (r + 1) + int64_t(i);
    EXPECT_EQ(integers[i], expected);
  }
}

TEST(MpiCommunicator, AllReduceSum16BitRoundsOnce) {
  MpiCommunicator comm;
  int n = comm.size();
  // Rank r contributes (r + 1) * 0.25 + i: sums are exact in f16 and bf16.
  std::vector<uint16_t> halves(5), bfloats(5);
  for (size_t i = 0; i < 5; ++i) {
    float v = 0.25f * (comm.rank() + 1) + float(i);
    halves[i] = floatToHalf(v);
    bfloats[i] = floatToBFloat16(v);
  }
  comm.allReduce(halves.data(), 5, DType::f16, ReduceOp::sum);
  comm.allReduce(bfloats.data(), 5, DType::bf16, ReduceOp::sum);
  for (size_t i = 0; i < 5; ++i) {
    float expected = 0;
    for (int r = 0; r < n; ++r)
      expected += 0.25f * (r + 1) + float(i);
    EXPECT_EQ(halfToFloat(halves[i]), expected) << i;
    EXPECT_EQ(bfloat16ToFloat(bfloats[i]), expected) << i;
  }
  // Every rank adds 2^-11 to 1 (each below half an f16 ulp of 1): in double
  // the N-way sum is 1 + (N - 1) * 2^-11, rounded once to f16, not N
  // roundings.
  uint16_t one = floatToHalf(1.0f), tiny = floatToHalf(0x1p-11f);
  std::vector<uint16_t> pair = {comm.rank() == 0 ? one : tiny, tiny};
  comm.allReduce(pair.data(), 2, DType::f16, ReduceOp::sum);
  EXPECT_EQ(pair[0], floatToHalf(1.0f + float(n - 1) * 0x1p-11f));
  EXPECT_EQ(pair[1], floatToHalf(float(n) * 0x1p-11f));
}

TEST(MpiCommunicator, AllReduceIsBitwiseIdenticalOnEveryRank) {
  MpiCommunicator comm;
  int n = comm.size();
  // Non-associative f32 values: any rank-dependent order would show.
  std::vector<float> buffer(64);
  for (size_t i = 0; i < buffer.size(); ++i)
    buffer[i] = 1.0f / float(3 + i + 7 * comm.rank()) * (i % 2 ? 1e7f : 1.0f);
  comm.allReduce(buffer.data(), buffer.size(), DType::f32, ReduceOp::sum);
  std::vector<float> all(buffer.size() * n);
  comm.allGather(buffer.data(), all.data(), buffer.size(), DType::f32);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < buffer.size(); ++i)
      ASSERT_EQ(all[r * buffer.size() + i], buffer[i]) << r << " " << i;
  // The documented order: a left fold over ranks 0, 1, ..., N-1 in double,
  // rounded once to float (as the evaluator's collectives sum).
  for (size_t i = 0; i < buffer.size(); ++i) {
    double sum = 1.0f / float(3 + i) * (i % 2 ? 1e7f : 1.0f);
    for (int r = 1; r < n; ++r)
      sum += 1.0f / float(3 + i + 7 * r) * (i % 2 ? 1e7f : 1.0f);
    EXPECT_EQ(buffer[i], float(sum)) << i;
  }
}

TEST(MpiCommunicator, ReduceScatterOutOfPlaceAndInPlace) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  const size_t slice = 5;
  std::vector<float> flat(slice * n);
  for (size_t k = 0; k < flat.size(); ++k)
    flat[k] = float(input(me, k));
  std::vector<float> mine(slice);
  comm.reduceScatter(flat.data(), mine.data(), slice, DType::f32,
                     ReduceOp::sum);
  for (size_t i = 0; i < slice; ++i) {
    double expected = 0;
    for (int r = 0; r < n; ++r)
      expected += input(r, me * slice + i);
    EXPECT_EQ(mine[i], float(expected)) << i;
  }
  // In place: rank r's slice of the flat buffer receives the result.
  std::vector<float> before = flat;
  float *own = flat.data() + me * slice;
  comm.reduceScatter(flat.data(), own, slice, DType::f32, ReduceOp::sum);
  for (size_t i = 0; i < slice; ++i)
    EXPECT_EQ(own[i], mine[i]) << i;
  for (size_t k = 0; k < flat.size(); ++k)
    if (k / slice != size_t(me)) {
      EXPECT_EQ(flat[k], before[k]) << "other slices are untouched: " << k;
    }
}

TEST(MpiCommunicator, AllGatherOutOfPlaceAndInPlace) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  const size_t slice = 3;
  std::vector<int32_t> mine(slice);
  for (size_t i = 0; i < slice; ++i)
    mine[i] = int32_t(100 * me + i);
  std::vector<int32_t> all(slice * n, -1);
  comm.allGather(mine.data(), all.data(), slice, DType::i32);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < slice; ++i)
      EXPECT_EQ(all[r * slice + i], int32_t(100 * r + i));
  std::vector<int32_t> inPlace(slice * n, -1);
  std::copy(mine.begin(), mine.end(), inPlace.begin() + me * slice);
  comm.allGather(inPlace.data() + me * slice, inPlace.data(), slice,
                 DType::i32);
  EXPECT_EQ(inPlace, all);
}

TEST(MpiCommunicator, ReduceScatterThenAllGatherIsAllReduce) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  const size_t slice = 4;
  std::vector<double> flat(slice * n), reduced(slice * n);
  for (size_t k = 0; k < flat.size(); ++k)
    flat[k] = reduced[k] = input(me, k) * 0.5;
  comm.allReduce(reduced.data(), reduced.size(), DType::f64, ReduceOp::sum);
  comm.reduceScatter(flat.data(), flat.data() + me * slice, slice, DType::f64,
                     ReduceOp::sum);
  comm.allGather(flat.data() + me * slice, flat.data(), slice, DType::f64);
  EXPECT_EQ(flat, reduced);
}

TEST(MpiCommunicator, BroadcastFromLastRank) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  std::vector<double> buffer(6);
  for (size_t i = 0; i < buffer.size(); ++i)
    buffer[i] = input(me, i);
  comm.broadcast(buffer.data(), buffer.size(), DType::f64, n - 1);
  for (size_t i = 0; i < buffer.size(); ++i)
    EXPECT_EQ(buffer[i], input(n - 1, i));
}

TEST(MpiCommunicator, ByteCountersFollowBusBandwidthConvention) {
  MpiCommunicator comm;
  uint64_t n = comm.size();
  std::vector<char> buffer(1024 * n);
  for (CollectiveKind kind :
       {CollectiveKind::allReduce, CollectiveKind::reduceScatter,
        CollectiveKind::allGather, CollectiveKind::broadcast}) {
    EXPECT_EQ(comm.stats(kind).calls, 0u);
    EXPECT_EQ(comm.stats(kind).bytes, 0u);
  }
  // All-reduce of 10 f32 (40 bytes) twice and 3 f64 (24 bytes) once.
  comm.allReduce(buffer.data(), 10, DType::f32, ReduceOp::sum);
  comm.allReduce(buffer.data(), 10, DType::f32, ReduceOp::max);
  comm.allReduce(buffer.data(), 3, DType::f64, ReduceOp::sum);
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).calls, 3u);
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).bytes,
            2 * (2 * (n - 1) * 40 / n) + 2 * (n - 1) * 24 / n);
  // Reduce-scatter of a flat buffer of n slices of 6 f16: (N-1)/N of 12n.
  comm.reduceScatter(buffer.data(), buffer.data() + comm.rank() * 12, 6,
                     DType::f16, ReduceOp::sum);
  EXPECT_EQ(comm.stats(CollectiveKind::reduceScatter).calls, 1u);
  EXPECT_EQ(comm.stats(CollectiveKind::reduceScatter).bytes, (n - 1) * 12);
  // All-gather of slices of 5 i64 into 40n bytes.
  comm.allGather(buffer.data() + comm.rank() * 40, buffer.data(), 5,
                 DType::i64);
  EXPECT_EQ(comm.stats(CollectiveKind::allGather).calls, 1u);
  EXPECT_EQ(comm.stats(CollectiveKind::allGather).bytes, (n - 1) * 40);
  comm.broadcast(buffer.data(), 7, DType::i32, 0);
  EXPECT_EQ(comm.stats(CollectiveKind::broadcast).calls, 1u);
  EXPECT_EQ(comm.stats(CollectiveKind::broadcast).bytes, n > 1 ? 28u : 0u);
  comm.resetStats();
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).calls, 0u);
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).bytes, 0u);
}

TEST(LocalCommunicator, SingleRankCopies) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<float> buffer = {1.5f, -2.0f, 3.0f};
  comm.allReduce(buffer.data(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(buffer, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  std::vector<float> out(3);
  comm.reduceScatter(buffer.data(), out.data(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(out, buffer);
  std::vector<float> gathered(3);
  comm.allGather(buffer.data(), gathered.data(), 3, DType::f32);
  EXPECT_EQ(gathered, buffer);
  comm.reduceScatter(buffer.data(), buffer.data(), 3, DType::f32,
                     ReduceOp::max);
  comm.broadcast(buffer.data(), 3, DType::f32, 0);
  comm.barrier();
  EXPECT_EQ(buffer, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).calls, 1u);
  EXPECT_EQ(comm.stats(CollectiveKind::reduceScatter).calls, 2u);
  EXPECT_EQ(comm.stats(CollectiveKind::allReduce).bytes, 0u);
  EXPECT_EQ(comm.stats(CollectiveKind::reduceScatter).bytes, 0u);
  EXPECT_EQ(comm.stats(CollectiveKind::allGather).bytes, 0u);
  EXPECT_EQ(comm.stats(CollectiveKind::broadcast).bytes, 0u);
}

TEST(Float16, HalfConversions) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // halfway to 2^16: to infinity
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);     // tie: to even
  EXPECT_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02); // tie: to even
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);            // smallest subnormal
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);            // tie: to even (zero)
  EXPECT_EQ(floatToHalf(0x1.8p-24f), 0x0002);          // tie: to even
  EXPECT_EQ(floatToHalf(0x1p-14f), 0x0400);            // smallest normal
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(floatToHalf(NAN) & 0x7e00, 0x7e00);
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x03ff), 0x3ffp-24f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) {
      ASSERT_EQ(floatToHalf(halfToFloat(uint16_t(h))), h) << h;
    }
}

TEST(Float16, BFloat16Conversions) {
  EXPECT_EQ(floatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBFloat16(1.0f + 0x1p-8f), 0x3f80); // tie: to even
  EXPECT_EQ(floatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(floatToBFloat16(-3.0f), 0xc040);
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(NAN))));
}

TEST(MpiCommunicator, StartedAllReducesOverlapAndCompleteInOrder) {
  MpiCommunicator comm;
  int n = comm.size();
  // Three all-reduces in flight at once, computation on other memory in
  // between, then one wait for the last ticket (tickets complete in order).
  std::vector<std::vector<float>> buffers(3, std::vector<float>(257));
  std::vector<uint64_t> tickets;
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t i = 0; i < buffers[b].size(); ++i)
      buffers[b][i] = float(input(comm.rank(), i + 1000 * b));
    tickets.push_back(comm.startAllReduce(buffers[b].data(), buffers[b].size(),
                                          DType::f32, ReduceOp::sum));
  }
  EXPECT_GT(computeMeanwhile(), 0);
  EXPECT_LT(tickets[0], tickets[1]);
  EXPECT_LT(tickets[1], tickets[2]);
  comm.wait(tickets.back());
  for (size_t b = 0; b < buffers.size(); ++b)
    for (size_t i = 0; i < buffers[b].size(); ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r)
        expected += input(r, i + 1000 * b);
      ASSERT_EQ(buffers[b][i], float(expected)) << "buffer " << b << " i " << i;
    }
  // Counted like allReduce: 3 calls of 257 floats.
  const CollectiveStats &stats = comm.stats(CollectiveKind::allReduce);
  EXPECT_EQ(stats.calls, 3u);
  uint64_t bytes = 257 * 4;
  EXPECT_EQ(stats.bytes, 3 * (2 * uint64_t(n - 1) * bytes / n));
  // A blocking collective after started ones waits for them first.
  uint64_t last =
      comm.startAllReduce(buffers[0].data(), 1, DType::f32, ReduceOp::max);
  comm.barrier();
  comm.wait(last);
}

TEST(MpiCommunicator, StartedReduceScattersInterleaveWithAllReduces) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  // A started all-reduce, two started reduce-scatters (one staging more
  // bytes than reserved, which grows it), computation, one wait: every
  // result as the blocking collectives give it, in start order.
  comm.reserveStaging(16);
  const size_t slices[] = {3, 40};
  std::vector<std::vector<float>> flats, mine;
  std::vector<float> sum(7);
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = float(input(me, i + 500));
  uint64_t first =
      comm.startAllReduce(sum.data(), sum.size(), DType::f32, ReduceOp::sum);
  uint64_t last = 0;
  for (size_t slice : slices) {
    flats.emplace_back(slice * n);
    for (size_t k = 0; k < flats.back().size(); ++k)
      flats.back()[k] = float(input(me, k + 100 * slice));
    mine.emplace_back(slice);
    last = comm.startReduceScatter(flats.back().data(), mine.back().data(),
                                   slice, DType::f32, ReduceOp::sum);
  }
  EXPECT_LT(first, last);
  EXPECT_GT(computeMeanwhile(), 0);
  comm.wait(last);
  for (size_t i = 0; i < sum.size(); ++i) {
    double expected = 0;
    for (int r = 0; r < n; ++r)
      expected += input(r, i + 500);
    ASSERT_EQ(sum[i], float(expected)) << i;
  }
  for (size_t b = 0; b < 2; ++b)
    for (size_t i = 0; i < slices[b]; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r)
        expected += input(r, me * slices[b] + i + 100 * slices[b]);
      ASSERT_EQ(mine[b][i], float(expected)) << "bucket " << b << " i " << i;
    }
  // Counted like reduceScatter: (N - 1) slices of 4 bytes per element.
  const CollectiveStats &stats = comm.stats(CollectiveKind::reduceScatter);
  EXPECT_EQ(stats.calls, 2u);
  EXPECT_EQ(stats.bytes, uint64_t(n - 1) * (3 + 40) * 4);
}

TEST(MpiCommunicator, StartedAllGathersDeliverEveryRanksSlice) {
  MpiCommunicator comm;
  int n = comm.size(), me = comm.rank();
  // Two started all-gathers (bf16 bits and f32) around a started
  // reduce-scatter, computation in between, waits in start order: each
  // result is every rank's slice in rank order.
  const size_t slice = 5;
  std::vector<uint16_t> halves(slice), gatheredHalves(slice * n);
  std::vector<float> floats(slice), gatheredFloats(slice * n), flat(slice * n),
      reduced(slice);
  for (size_t k = 0; k < slice; ++k) {
    halves[k] = uint16_t(1000 * me + k);
    floats[k] = float(input(me, k));
  }
  for (size_t k = 0; k < flat.size(); ++k)
    flat[k] = float(input(me, k + 7));
  uint64_t first = comm.startAllGather(halves.data(), gatheredHalves.data(),
                                       slice, DType::bf16);
  uint64_t scatter = comm.startReduceScatter(flat.data(), reduced.data(), slice,
                                             DType::f32, ReduceOp::sum);
  uint64_t last = comm.startAllGather(floats.data(), gatheredFloats.data(),
                                      slice, DType::f32);
  EXPECT_LT(first, scatter);
  EXPECT_LT(scatter, last);
  EXPECT_GT(computeMeanwhile(), 0);
  comm.wait(first);
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < slice; ++k)
      ASSERT_EQ(gatheredHalves[r * slice + k], uint16_t(1000 * r + k));
  comm.wait(last);
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < slice; ++k)
      ASSERT_EQ(gatheredFloats[r * slice + k], float(input(r, k)));
  for (size_t k = 0; k < slice; ++k) {
    double expected = 0;
    for (int r = 0; r < n; ++r)
      expected += input(r, me * slice + k + 7);
    ASSERT_EQ(reduced[k], float(expected)) << k;
  }
  // Counted like allGather: (N - 1) slices per call.
  const CollectiveStats &stats = comm.stats(CollectiveKind::allGather);
  EXPECT_EQ(stats.calls, 2u);
  EXPECT_EQ(stats.bytes, uint64_t(n - 1) * slice * (2 + 4));
}

TEST(CollectiveTimeout, ParsesPositiveFiniteBoundedSeconds) {
  double seconds = 0;
  std::string error;
  for (auto [text, expected] : {std::pair<const char *, double>{"3", 3.0},
                                {"0.5", 0.5},
                                {"1e3", 1000.0},
                                {"604800", 604800.0}}) {
    EXPECT_TRUE(parseCollectiveTimeout(text, seconds, error)) << text;
    EXPECT_EQ(seconds, expected) << text;
  }
  for (const char *text :
       {"", "0", "-1", "3s", "abc", "inf", "nan", "604800.5", "1e400"}) {
    seconds = -7;
    EXPECT_FALSE(parseCollectiveTimeout(text, seconds, error)) << text;
    EXPECT_EQ(error, std::string("expected a positive number of seconds of at "
                                 "most 604800, got '") +
                         text + "'");
    EXPECT_EQ(seconds, -7) << text;
  }
}

namespace {

/// CPU seconds this process has used (all threads).
double cpuSeconds() {
  timespec time{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
  return double(time.tv_sec) + 1e-9 * double(time.tv_nsec);
}

double wallSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

TEST(MpiCommunicator, WaitingForALateRankSleeps) {
  MpiCommunicator comm(/*timeoutSeconds=*/30);
  EXPECT_EQ(comm.collectiveTimeout(), 30);
  int n = comm.size(), me = comm.rank();
  if (n == 1)
    GTEST_SKIP() << "needs a peer to wait for";
  comm.setContext("the sleeping test");
  // The last rank arrives 1.5 s late at a blocking all-reduce, a started one
  // and a barrier; the others wait, and must not spin a core meanwhile: a
  // spinning wait would use about 1.5 s of CPU (less when ranks share cores,
  // but still far above the bound).
  const double lateSeconds = 1.5;
  std::vector<float> buffer(1000);
  for (int round = 0; round < 3; ++round) {
    std::fill(buffer.begin(), buffer.end(), float(me + 1));
    comm.barrier();
    double cpuStart = cpuSeconds(), wallStart = wallSeconds();
    if (me == n - 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(lateSeconds));
    if (round == 0)
      comm.allReduce(buffer.data(), buffer.size(), DType::f32, ReduceOp::sum);
    else if (round == 1)
      comm.wait(comm.startAllReduce(buffer.data(), buffer.size(), DType::f32,
                                    ReduceOp::sum));
    else
      comm.barrier();
    double cpu = cpuSeconds() - cpuStart, wall = wallSeconds() - wallStart;
    if (round < 2) {
      for (size_t i = 0; i < buffer.size(); ++i)
        ASSERT_EQ(buffer[i], float(n * (n + 1) / 2)) << round << " " << i;
    }
    if (me != n - 1) {
      EXPECT_GE(wall, lateSeconds - 0.1) << "round " << round;
      EXPECT_LT(cpu, 0.3) << "round " << round << ": " << cpu
                          << " CPU seconds in " << wall << " s of waiting";
    }
  }
}
