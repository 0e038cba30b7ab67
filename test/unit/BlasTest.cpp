//===- BlasTest.cpp - choosing OpenBLAS's kernels at start-up -------------===//

#include "runtime/Blas.h"

#include <gtest/gtest.h>

using namespace sharc::rt;

TEST(Blas, CoreLevelsOfTheKernelsOpenBLASHas) {
  EXPECT_EQ(blasCoreLevel("Prescott"), SimdLevel::sse);
  EXPECT_EQ(blasCoreLevel("nehalem"), SimdLevel::sse);
  EXPECT_EQ(blasCoreLevel("Sandybridge"), SimdLevel::avx);
  EXPECT_EQ(blasCoreLevel("Haswell"), SimdLevel::avx2);
  EXPECT_EQ(blasCoreLevel("Zen"), SimdLevel::avx2);
  EXPECT_EQ(blasCoreLevel("SKYLAKEX"), SimdLevel::avx512);
  EXPECT_EQ(blasCoreLevel("Cooperlake"), SimdLevel::avx512);
  EXPECT_EQ(blasCoreLevel("NoSuchCore"), std::nullopt);
}

TEST(Blas, GenericKernelsOnAWideCpuRunAgainWithTheRightCore) {
  // OpenBLAS 0.3.21 on Emerald Rapids: Prescott.
  BlasDecision d = decideBlasKernels("Prescott", SimdLevel::avx512, nullptr,
                                     nullptr, nullptr);
  EXPECT_EQ(d.rerunWith, "SkylakeX");
  EXPECT_TRUE(d.warning.empty());
  d = decideBlasKernels("Sandybridge", SimdLevel::avx2, nullptr, nullptr,
                        nullptr);
  EXPECT_EQ(d.rerunWith, "Haswell");
}

TEST(Blas, KernelsOfTheCpuOrItsLevelAreKept) {
  for (const char *core : {"Cooperlake", "SkylakeX", "Haswell", "Zen"}) {
    BlasDecision d =
        decideBlasKernels(core, SimdLevel::avx512, nullptr, nullptr, nullptr);
    EXPECT_TRUE(d.rerunWith.empty()) << core;
    EXPECT_TRUE(d.warning.empty()) << core;
  }
  // A CPU without AVX2 has nothing better to run; an unknown core is left
  // alone.
  EXPECT_TRUE(
      decideBlasKernels("Prescott", SimdLevel::avx, nullptr, nullptr, nullptr)
          .rerunWith.empty());
  EXPECT_TRUE(
      decideBlasKernels("Future", SimdLevel::avx512, nullptr, nullptr, nullptr)
          .rerunWith.empty());
}

TEST(Blas, TheUsersCoreIsKeptWithAWarning) {
  BlasDecision d = decideBlasKernels("Prescott", SimdLevel::avx512, "Prescott",
                                     nullptr, nullptr);
  EXPECT_TRUE(d.rerunWith.empty());
  EXPECT_NE(d.warning.find("OPENBLAS_CORETYPE=Prescott"), std::string::npos)
      << d.warning;
  EXPECT_NE(d.warning.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos)
      << d.warning;
}

TEST(Blas, SharcBlasCoreAsksForACoreOrKeepsTheLibrarys) {
  EXPECT_EQ(decideBlasKernels("Cooperlake", SimdLevel::avx512, nullptr,
                              "Haswell", nullptr)
                .rerunWith,
            "Haswell");
  EXPECT_TRUE(decideBlasKernels("Haswell", SimdLevel::avx512, nullptr,
                                "haswell", nullptr)
                  .rerunWith.empty());
  BlasDecision keep = decideBlasKernels("Prescott", SimdLevel::avx512, nullptr,
                                        "keep", nullptr);
  EXPECT_TRUE(keep.rerunWith.empty());
  EXPECT_TRUE(keep.warning.empty());
}

TEST(Blas, ARerunNeverRunsAgain) {
  EXPECT_TRUE(decideBlasKernels("SkylakeX", SimdLevel::avx512, "SkylakeX",
                                nullptr, "SkylakeX")
                  .warning.empty());
  // The library ignored the core it was given: a warning, no loop.
  BlasDecision d = decideBlasKernels("Prescott", SimdLevel::avx512, "SkylakeX",
                                     nullptr, "SkylakeX");
  EXPECT_TRUE(d.rerunWith.empty());
  EXPECT_NE(d.warning.find("Prescott"), std::string::npos) << d.warning;
}
