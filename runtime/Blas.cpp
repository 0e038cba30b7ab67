//===- Blas.cpp - The BLAS library's kernels for this CPU -----------------===//

#include "runtime/Blas.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

extern "C" {
char *openblas_get_corename(void);
char *openblas_get_config(void);
}

namespace sharc::rt {

namespace {

bool equalNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// The kernels OpenBLAS 0.3's DYNAMIC_ARCH builds hold for x86-64, by the
/// widest instructions they use.
struct CoreLevel {
  const char *name;
  SimdLevel level;
};
constexpr CoreLevel kCores[] = {
    {"Katmai", SimdLevel::sse},        {"Coppermine", SimdLevel::sse},
    {"Northwood", SimdLevel::sse},     {"Prescott", SimdLevel::sse},
    {"Banias", SimdLevel::sse},        {"Atom", SimdLevel::sse},
    {"Core2", SimdLevel::sse},         {"Penryn", SimdLevel::sse},
    {"Dunnington", SimdLevel::sse},    {"Nehalem", SimdLevel::sse},
    {"Athlon", SimdLevel::sse},        {"Opteron", SimdLevel::sse},
    {"Opteron(SSE3)", SimdLevel::sse}, {"Barcelona", SimdLevel::sse},
    {"Nano", SimdLevel::sse},          {"Bobcat", SimdLevel::sse},
    {"Sandybridge", SimdLevel::avx},   {"Bulldozer", SimdLevel::avx},
    {"Piledriver", SimdLevel::avx},    {"Steamroller", SimdLevel::avx},
    {"Haswell", SimdLevel::avx2},      {"Excavator", SimdLevel::avx2},
    {"Zen", SimdLevel::avx2},          {"SkylakeX", SimdLevel::avx512},
    {"Cooperlake", SimdLevel::avx512}, {"SapphireRapids", SimdLevel::avx512},
};

/// True unless an MPI launcher says this is a rank other than 0.
bool firstRank() {
  for (const char *name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char *rank = std::getenv(name))
      return std::strcmp(rank, "0") == 0;
  return true;
}

} // namespace

const char *simdLevelName(SimdLevel level) {
  switch (level) {
  case SimdLevel::sse:
    return "SSE";
  case SimdLevel::avx:
    return "AVX";
  case SimdLevel::avx2:
    return "AVX2";
  case SimdLevel::avx512:
    return "AVX-512";
  }
  return "?";
}

SimdLevel cpuSimdLevel() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return SimdLevel::avx2;
  if (__builtin_cpu_supports("avx"))
    return SimdLevel::avx;
#endif
  return SimdLevel::sse;
}

std::optional<SimdLevel> blasCoreLevel(std::string_view name) {
  for (const CoreLevel &core : kCores)
    if (equalNoCase(core.name, name))
      return core.level;
  return std::nullopt;
}

BlasDecision decideBlasKernels(std::string_view core, SimdLevel cpu,
                               const char *userCore, const char *requested,
                               const char *rerunCore) {
  std::string running(core);
  if (requested && equalNoCase(requested, "keep"))
    return {};
  if (rerunCore) {
    if (equalNoCase(core, rerunCore))
      return {};
    return {"", "OpenBLAS runs its " + running +
                    " kernels although sharc ran it again with "
                    "OPENBLAS_CORETYPE=" +
                    rerunCore + " (the library does not have that core)"};
  }
  if (requested && *requested) {
    if (equalNoCase(core, requested))
      return {};
    return {requested, ""};
  }
  std::optional<SimdLevel> level = blasCoreLevel(core);
  if (!level || *level >= SimdLevel::avx2 || cpu < SimdLevel::avx2)
    return {};
  std::string best = cpu == SimdLevel::avx512 ? "SkylakeX" : "Haswell";
  if (userCore)
    return {"", "OpenBLAS runs its " + running + " kernels (" +
                    simdLevelName(*level) + ", OPENBLAS_CORETYPE=" + userCore +
                    ") on a CPU with " + simdLevelName(cpu) +
                    ": matrix products run several times slower than with "
                    "OPENBLAS_CORETYPE=" +
                    best};
  return {best, ""};
}

void ensureBlasKernels(char **argv) {
  // The core this process was run again with, if it was.
  std::string rerun;
  if (const char *value = std::getenv("SHARC_BLAS_RERUN")) {
    rerun = value;
    unsetenv("SHARC_BLAS_RERUN");
  }
  const char *core = openblas_get_corename();
  std::string running = core ? core : "";
  SimdLevel cpu = cpuSimdLevel();
  BlasDecision decision = decideBlasKernels(
      running, cpu, std::getenv("OPENBLAS_CORETYPE"),
      std::getenv("SHARC_BLAS_CORE"), rerun.empty() ? nullptr : rerun.c_str());
  if (!decision.rerunWith.empty()) {
    if (firstRank())
      std::fprintf(stderr,
                   "sharc: note: OpenBLAS chose its %s kernels on this CPU "
                   "(%s); running again with OPENBLAS_CORETYPE=%s\n",
                   running.c_str(), simdLevelName(cpu),
                   decision.rerunWith.c_str());
    setenv("OPENBLAS_CORETYPE", decision.rerunWith.c_str(), 1);
    setenv("SHARC_BLAS_RERUN", decision.rerunWith.c_str(), 1);
    execv("/proc/self/exe", argv);
    int error = errno;
    unsetenv("SHARC_BLAS_RERUN");
    decision.warning =
        "cannot run again with OPENBLAS_CORETYPE=" + decision.rerunWith + " (" +
        std::strerror(error) + "); matrix products use OpenBLAS's " + running +
        " kernels";
  }
  if (!decision.warning.empty() && firstRank())
    std::fprintf(stderr, "sharc: warning: %s\n", decision.warning.c_str());
}

std::string blasDescription() {
  const char *config = openblas_get_config();
  const char *core = openblas_get_corename();
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": its first two words.
  std::string library = config ? config : "OpenBLAS";
  size_t space = library.find(' ');
  if (space != std::string::npos)
    space = library.find(' ', space + 1);
  if (space != std::string::npos)
    library.resize(space);
  return library + ", " + (core ? core : "unknown") + " kernels";
}

} // namespace sharc::rt
