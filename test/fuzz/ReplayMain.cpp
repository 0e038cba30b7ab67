//===- ReplayMain.cpp - Runs a fuzz target on saved inputs ----------------===//
//
// Linked with a fuzz target's source in the ordinary build (no libFuzzer, no
// sanitizers): runs LLVMFuzzerTestOneInput on each file given, or on each
// file of each directory given, under a 2 GiB address-space limit and with
// 30 seconds per input, so that the inputs that once crashed a reader,
// overflowed its stack, exhausted the memory or hung it stay fixed.  Exits
// with status 0 when every input ran, 1 when there was none or one could not
// be read.
//
//   sharc-NAME-replay FILE|DIR...
//
//===----------------------------------------------------------------------===//

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  constexpr rlim_t kAddressSpace = rlim_t(2) << 30;
  struct rlimit limit = {kAddressSpace, kAddressSpace};
  setrlimit(RLIMIT_AS, &limit);

  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path = argv[i];
    if (!std::filesystem::is_directory(path)) {
      inputs.push_back(path);
      continue;
    }
    std::vector<std::filesystem::path> files;
    for (const auto &entry : std::filesystem::directory_iterator(path))
      if (entry.is_regular_file())
        files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    inputs.insert(inputs.end(), files.begin(), files.end());
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 1;
  }
  for (const std::filesystem::path &path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 1;
    }
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    alarm(30); // SIGALRM ends the process: a hang is a failure
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                           bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
