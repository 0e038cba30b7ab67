//===- NpyFuzzer.cpp - libFuzzer target for the .npy reader ---------------===//
//
// Feeds arbitrary bytes to parseNpy (runtime/Npy.cpp), which reads every
// weight, state and data file of the CLI and the training binaries.  It must
// either fail with a message naming the file or return an array whose data
// holds exactly its shape's elements and whose sizes multiply without
// overflow; anything else (a crash, a sanitizer report) is a bug.
//
//===----------------------------------------------------------------------===//

#include "runtime/Npy.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sharc::rt::NpyArray array;
  std::string error;
  if (!sharc::rt::parseNpy("fuzz.npy", reinterpret_cast<const char *>(data),
                           size, array, error)) {
    if (error.rfind("fuzz.npy: ", 0) != 0) {
      std::fprintf(stderr, "error does not name the file: %s\n", error.c_str());
      std::abort();
    }
    return 0;
  }
  // What readers compute from a shape: row-major strides (the evaluator's
  // Tensor, the data loader's row size).  None may overflow.
  int64_t stride = 1;
  for (size_t i = array.shape.size(); i-- > 0;) {
    if (array.shape[i] < 0 ||
        __builtin_mul_overflow(stride, array.shape[i], &stride)) {
      std::fprintf(stderr, "the strides of the shape overflow\n");
      std::abort();
    }
  }
  // numElements() is what every reader multiplies by the element size.
  if (stride != array.numElements() ||
      uint64_t(array.numElements()) * sharc::rt::npyTypeBytes(array.type) !=
          array.data.size()) {
    std::fprintf(stderr, "%zu data bytes for %lld elements\n",
                 array.data.size(), (long long)array.numElements());
    std::abort();
  }
  return 0;
}
