//===- Train.h - sharc eval --train -----------------------------*- C++ -*-===//
//
// Training on the reference evaluator: the train pipeline and the step loop
// of `sharc eval --train` (Train.cpp).  Its flags are those of Options.h.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_TOOLS_SHARC_TRAIN_H
#define SHARC_TOOLS_SHARC_TRAIN_H

#include "tools/sharc/Model.h"

#include "mlir/IR/MLIRContext.h"

#include <map>
#include <string>

namespace sharc {

/// `sharc eval --train`: builds the training step of `model` and runs the
/// requested number of steps on the evaluator.  `inputs` maps --input names
/// to .npy paths: data inputs (streamed by rows) and initial parameter
/// values.  Returns the exit status.
int runTraining(mlir::MLIRContext &context, LoadedModel &model,
                const std::map<std::string, std::string> &inputs);

} // namespace sharc

#endif // SHARC_TOOLS_SHARC_TRAIN_H
