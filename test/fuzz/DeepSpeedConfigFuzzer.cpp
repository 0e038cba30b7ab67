//===- DeepSpeedConfigFuzzer.cpp - libFuzzer target for ds_config.json ----===//
//
// Feeds arbitrary bytes to the DeepSpeed config reader as the text of a
// config file, then resolves the batch sizes it gives for a model whose
// micro-batch is 4, on 1 and on 3 ranks, as `sharc eval --train` and
// `sharc compile` do.  Each must either fail with a message that names the
// file or succeed with consistent batch sizes; anything else (a crash, a
// sanitizer report, a message without the file name, train != micro × GAS ×
// ranks) is a bug.
//
//===----------------------------------------------------------------------===//

#include "frontends/deepspeed/Config.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<sharc::DeepSpeedConfig> config =
      sharc::parseDeepSpeedConfig(text, "fuzz.json");
  if (!config) {
    std::string message = llvm::toString(config.takeError());
    if (!llvm::StringRef(message).starts_with("fuzz.json")) {
      std::fprintf(stderr, "error does not name the file: %s\n",
                   message.c_str());
      std::abort();
    }
    return 0;
  }
  for (int64_t ranks : {1, 3}) {
    llvm::Expected<sharc::BatchSizes> sizes = sharc::resolveBatchSizes(
        config->batch, ranks, /*modelMicroBatch=*/4, "the fuzzer's model");
    if (!sizes) {
      llvm::consumeError(sizes.takeError());
      continue;
    }
    if (sizes->microBatchPerGpu != 4 || sizes->gradAccumSteps < 1 ||
        sizes->trainBatchSize / ranks / 4 != sizes->gradAccumSteps ||
        sizes->trainBatchSize % (4 * ranks) != 0) {
      std::fprintf(stderr, "inconsistent batch sizes: %lld %lld %lld\n",
                   (long long)sizes->trainBatchSize,
                   (long long)sizes->microBatchPerGpu,
                   (long long)sizes->gradAccumSteps);
      std::abort();
    }
  }
  return 0;
}
