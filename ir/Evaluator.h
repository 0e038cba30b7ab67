//===- Evaluator.h - reference evaluator of sharc IR --------------*- C++
//-*-===//
//
// The executable meaning of every sharc op: runs a func.func of sharc ops on
// host tensors.  It is the oracle for the importer, for every pass and for the
// generated code.  Functions that contain collectives run as N simulated
// ranks, one thread each, so collectives have their real semantics.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_EVALUATOR_H
#define SHARC_IR_EVALUATOR_H

#include "ir/Tensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sharc {

class CollectiveGroup;

/// Whether the evaluator can hold a tensor of `shape` (8 bytes per element)
/// in this machine's physical memory: std::nullopt when it can, else why not
/// ("it needs N bytes ..."), for a diagnostic that names the tensor.
std::optional<std::string> checkEvaluatorMemory(llvm::ArrayRef<int64_t> shape);
std::optional<std::string> checkEvaluatorMemory(mlir::RankedTensorType type);

/// Evaluates `func` on `args` (one tensor per argument, matching the argument
/// types exactly) as rank `rank` of `group` (null: a group of one).  Run-time
/// errors (an index out of range, a type mismatch of an argument) are emitted
/// as diagnostics located at the offending op or function, and give failure.
/// With a group (see ir/Collectives.h), a failure aborts the group so that
/// the other ranks fail too instead of waiting, and success marks the rank
/// as finished; a group serves one evaluation per rank.
mlir::FailureOr<std::vector<Tensor>> evaluate(mlir::func::FuncOp func,
                                              llvm::ArrayRef<Tensor> args,
                                              CollectiveGroup *group = nullptr,
                                              int rank = 0);

/// Evaluates `func` as `argsPerRank.size()` ranks, each on its own thread,
/// connected by one collective group.  Returns each rank's results.  If any
/// rank fails, every rank stops (collectives of the others are released) and
/// the call fails.
mlir::FailureOr<std::vector<std::vector<Tensor>>>
evaluateRanks(mlir::func::FuncOp func,
              llvm::ArrayRef<std::vector<Tensor>> argsPerRank);

/// Evaluates one op whose operands are all known; used for constant folding
/// by the importer.  `operands` match the op's operand types.
mlir::FailureOr<std::vector<Tensor>>
evaluateOp(mlir::Operation *op, llvm::ArrayRef<Tensor> operands);

} // namespace sharc

#endif // SHARC_IR_EVALUATOR_H
