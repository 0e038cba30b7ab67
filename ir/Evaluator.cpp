//===- Evaluator.cpp - reference evaluator of sharc IR --------------------===//
//
// Runs a function op by op (a func.call runs its callee, a function of the
// same module, as the same rank).  The ops themselves are evaluated by the
// family evaluators (EvalElementwise.cpp, EvalData.cpp, EvalLinalg.cpp,
// EvalNN.cpp, EvalCollectives.cpp); this file holds the driver and the shared
// helpers.
//
//===----------------------------------------------------------------------===//

#include "ir/Evaluator.h"
#include "ir/Collectives.h"
#include "ir/EvalInternal.h"
#include "ir/SharcOps.h"
#include "runtime/System.h"

#include "llvm/ADT/DenseMap.h"

#include <cstring>
#include <thread>

using namespace mlir;
using namespace sharc;
using namespace sharc::eval;

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

InFlightDiagnostic OpCall::error() const {
  InFlightDiagnostic diag = op->emitError();
  if (group && group->size() > 1)
    diag.attachNote() << "on rank " << rank << " of " << group->size();
  return diag;
}

void eval::roundInPlace(Tensor &tensor) {
  MutableArrayRef<double> data = tensor.floats();
  switch (tensor.dtype()) {
  case DType::f32:
    for (double &v : data)
      v = static_cast<double>(static_cast<float>(v));
    return;
  case DType::f16:
    for (double &v : data)
      v = static_cast<double>(static_cast<_Float16>(v));
    return;
  case DType::bf16:
    for (double &v : data)
      v = roundTo(DType::bf16, v);
    return;
  default:
    return;
  }
}

void eval::wrapInPlace(Tensor &tensor) {
  if (tensor.dtype() != DType::i32 && tensor.dtype() != DType::i1)
    return;
  for (int64_t &v : tensor.ints())
    v = wrapTo(tensor.dtype(), v);
}

SmallVector<int64_t> eval::broadcastStrides(ArrayRef<int64_t> from,
                                            ArrayRef<int64_t> to) {
  SmallVector<int64_t> own = rowMajorStrides(from);
  SmallVector<int64_t> strides(to.size(), 0);
  size_t offset = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    strides[offset + d] = from[d] == 1 ? 0 : own[d];
  return strides;
}

void eval::copyStrided(const Tensor &in, Tensor &out, ArrayRef<int64_t> strides,
                       int64_t base) {
  if (in.isFloat()) {
    ArrayRef<double> src = in.floats();
    MutableArrayRef<double> dst = out.floats();
    stridedLoop<1>(
        out.shape(), {strides}, {base},
        [&](int64_t o, std::array<int64_t, 1> at) { dst[o] = src[at[0]]; });
    return;
  }
  ArrayRef<int64_t> src = in.ints();
  MutableArrayRef<int64_t> dst = out.ints();
  stridedLoop<1>(
      out.shape(), {strides}, {base},
      [&](int64_t o, std::array<int64_t, 1> at) { dst[o] = src[at[0]]; });
}

void eval::copyElements(const Tensor &in, int64_t from, Tensor &out, int64_t to,
                        int64_t count) {
  if (count == 0)
    return;
  if (in.isFloat())
    std::memcpy(&out.floats()[to], &in.floats()[from], count * sizeof(double));
  else
    std::memcpy(&out.ints()[to], &in.ints()[from], count * sizeof(int64_t));
}

int64_t eval::product(ArrayRef<int64_t> shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d)
    n *= shape[d];
  return n;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

std::optional<std::string>
sharc::checkEvaluatorMemory(ArrayRef<int64_t> shape) {
  static const uint64_t physical = rt::hostMemoryBytes();
  std::optional<int64_t> count = checkedNumElements(shape);
  // Every element is held as a double or an int64_t.
  if (count && static_cast<uint64_t>(*count) * 8 <= physical)
    return std::nullopt;
  std::string text;
  llvm::raw_string_ostream os(text);
  if (!count)
    os << "more than " << kMaxElements << " elements";
  else
    os << "it needs " << *count * 8 << " bytes (" << *count
       << " elements of 8 bytes in the evaluator), more than this machine's "
       << physical << " bytes of memory";
  return text;
}

std::optional<std::string> sharc::checkEvaluatorMemory(RankedTensorType type) {
  return checkEvaluatorMemory(type.getShape());
}

/// Prints `type` for diagnostics.
static std::string describeType(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

/// True when `tensor` has exactly the (static, ranked) tensor type `type`
/// (or the one a future of that type holds).
static bool matchesType(const Tensor &tensor, Type type) {
  RankedTensorType ranked = storedTensorType(type);
  if (!ranked || !ranked.hasStaticShape())
    return false;
  std::optional<DType> dtype = dtypeOf(ranked.getElementType());
  return dtype && *dtype == tensor.dtype() &&
         ranked.getShape() == tensor.shape();
}

/// Creates zero-filled tensors for the results of `op`, when they fit in
/// memory.
static LogicalResult makeResults(const OpCall &call,
                                 SmallVectorImpl<Tensor> &results) {
  for (Type type : call.op->getResultTypes()) {
    // A collective's future holds the tensor it will deliver.
    RankedTensorType ranked = storedTensorType(type);
    std::optional<DType> dtype =
        ranked ? dtypeOf(ranked.getElementType()) : std::nullopt;
    if (!dtype || !ranked.hasStaticShape())
      return call.error() << "cannot evaluate a result of type " << type;
    if (std::optional<std::string> tooBig = checkEvaluatorMemory(ranked))
      return call.error() << "cannot evaluate a result of type " << type << ": "
                          << *tooBig;
    results.emplace_back(*dtype, ranked.getShape());
  }
  return success();
}

static LogicalResult evalOp(Operation *op, ArrayRef<const Tensor *> operands,
                            SmallVectorImpl<Tensor> &results,
                            CollectiveGroup *group, int rank);

/// Evaluates the body of `fusion` as a function of whole tensors: the block
/// arguments are `operands`, each op runs as it would unfused, and the
/// yielded tensors are the results.
static LogicalResult evalFusion(FusionOp fusion,
                                ArrayRef<const Tensor *> operands,
                                SmallVectorImpl<Tensor> &results,
                                CollectiveGroup *group, int rank) {
  Block &body = fusion.getBody().front();
  if (body.getNumArguments() != operands.size())
    return fusion.emitError() << "cannot evaluate a 'sharc.fusion' whose body "
                                 "does not take its operands";
  llvm::DenseMap<Value, const Tensor *> values;
  for (auto [arg, tensor] : llvm::zip(body.getArguments(), operands))
    values[arg] = tensor;
  std::vector<std::unique_ptr<Tensor>> owned;
  for (Operation &op : body) {
    SmallVector<const Tensor *> inputs;
    for (Value operand : op.getOperands()) {
      const Tensor *tensor = values.lookup(operand);
      if (!tensor)
        return op.emitError() << "operand used before it is defined";
      inputs.push_back(tensor);
    }
    if (isa<YieldOp>(op)) {
      for (const Tensor *tensor : inputs)
        results.push_back(*tensor);
      return success();
    }
    SmallVector<Tensor> opResults;
    if (failed(evalOp(&op, inputs, opResults, group, rank)))
      return failure();
    for (auto [value, tensor] : llvm::zip(op.getResults(), opResults)) {
      owned.push_back(std::make_unique<Tensor>(std::move(tensor)));
      values[value] = owned.back().get();
    }
  }
  return fusion.emitError() << "'sharc.fusion' body has no 'sharc.yield'";
}

/// Evaluates `op` on `operands` into `results`.
static LogicalResult evalOp(Operation *op, ArrayRef<const Tensor *> operands,
                            SmallVectorImpl<Tensor> &results,
                            CollectiveGroup *group, int rank) {
  if (auto fusion = dyn_cast<FusionOp>(op))
    return evalFusion(fusion, operands, results, group, rank);
  OpCall call{op, operands, {}, group, rank};
  if (failed(makeResults(call, results)))
    return failure();
  call.results = results;
  for (auto family : {evalElementwiseOp, evalDataOp, evalLinalgOp, evalNNOp,
                      evalCollectiveOp})
    if (std::optional<LogicalResult> result = family(call))
      return *result;
  return call.error() << "the evaluator does not support '" << op->getName()
                      << "'";
}

namespace {
/// Where a function is being evaluated: the rank, and the functions being
/// run (callers first), so that a recursive call is an error, not a stack
/// overflow.
struct Frame {
  CollectiveGroup *group;
  int rank;
  SmallVector<Operation *, 4> active;
};

/// The tensors of the values visible in one block being evaluated: its own
/// and those of the blocks around it.
struct Scope {
  const Scope *parent = nullptr;
  llvm::DenseMap<Value, const Tensor *> values;

  const Tensor *lookup(Value value) const {
    for (const Scope *scope = this; scope; scope = scope->parent)
      if (const Tensor *tensor = scope->values.lookup(value))
        return tensor;
    return nullptr;
  }
};
} // namespace

static FailureOr<std::vector<Tensor>> runBlock(Block &block,
                                               ArrayRef<const Tensor *> args,
                                               const Scope *parent,
                                               Frame &frame);

/// Evaluates `call` by running its callee, a function of the same module, as
/// the same rank of the same group.
static LogicalResult evalCall(func::CallOp call,
                              ArrayRef<const Tensor *> operands,
                              SmallVectorImpl<Tensor> &results, Frame &frame) {
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      call, call.getCalleeAttr());
  if (!callee)
    return call.emitError() << "cannot evaluate a call to unknown function "
                            << call.getCalleeAttr();
  if (llvm::is_contained(frame.active, callee.getOperation()))
    return call.emitError() << "cannot evaluate a recursive call to '@"
                            << callee.getSymName() << "'";
  if (callee.getNumArguments() != operands.size())
    return call.emitError()
           << "calls '" << callee.getSymName() << "' with " << operands.size()
           << " operands, it takes " << callee.getNumArguments();
  for (auto [i, tensor] : llvm::enumerate(operands))
    if (!matchesType(*tensor, callee.getArgumentTypes()[i]))
      return call.emitError()
             << "operand #" << i << " is " << tensor->describe()
             << ", expected " << describeType(callee.getArgumentTypes()[i]);
  if (callee.isExternal())
    return callee.emitError() << "cannot evaluate a function without a body";
  if (!callee.getBody().hasOneBlock())
    return callee.emitError()
           << "the evaluator supports single-block functions only";
  frame.active.push_back(callee);
  FailureOr<std::vector<Tensor>> values =
      runBlock(callee.getBody().front(), operands, nullptr, frame);
  frame.active.pop_back();
  if (failed(values))
    return failure();
  results.append(std::make_move_iterator(values->begin()),
                 std::make_move_iterator(values->end()));
  return success();
}

/// Evaluates `loop`: its body once per micro-batch, in order, on rows
/// [k m, (k + 1) m) of every input and the values carried so far.
static LogicalResult evalMicroBatchLoop(MicroBatchLoopOp loop,
                                        ArrayRef<const Tensor *> operands,
                                        SmallVectorImpl<Tensor> &results,
                                        const Scope &scope, Frame &frame) {
  size_t numInputs = loop.getInputs().size();
  int64_t count = loop.getCount();
  std::vector<Tensor> carried;
  for (const Tensor *init : operands.drop_front(numInputs))
    carried.push_back(*init);
  for (int64_t k = 0; k < count; ++k) {
    std::vector<Tensor> slices;
    for (const Tensor *input : operands.take_front(numInputs)) {
      SmallVector<int64_t> shape(input->shape());
      shape[0] /= count;
      Tensor slice(input->dtype(), shape);
      int64_t n = slice.numElements();
      copyElements(*input, k * n, slice, 0, n);
      slices.push_back(std::move(slice));
    }
    SmallVector<const Tensor *> args;
    for (const Tensor &slice : slices)
      args.push_back(&slice);
    for (const Tensor &value : carried)
      args.push_back(&value);
    FailureOr<std::vector<Tensor>> yielded =
        runBlock(loop.getBody().front(), args, &scope, frame);
    if (failed(yielded))
      return failure();
    carried = std::move(*yielded);
  }
  results.append(std::make_move_iterator(carried.begin()),
                 std::make_move_iterator(carried.end()));
  return success();
}

/// Evaluates `block` with its arguments bound to `args` (values of enclosing
/// blocks come from `parent`) and returns the tensors its terminator
/// (`func.return` or `sharc.yield`) passes on.  A tensor is freed after the
/// last op of the block that reads it, directly or inside a region.
static FailureOr<std::vector<Tensor>> runBlock(Block &block,
                                               ArrayRef<const Tensor *> args,
                                               const Scope *parent,
                                               Frame &frame) {
  Scope scope;
  scope.parent = parent;
  for (auto [arg, tensor] : llvm::zip(block.getArguments(), args))
    scope.values[arg] = tensor;

  // Each value defined in the block is freed after the last op of the
  // block that reads it.
  llvm::DenseMap<Value, size_t> lastUse;
  for (auto [index, op] : llvm::enumerate(block))
    op.walk([&, index = index](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (operand.getParentBlock() == &block)
          lastUse[operand] = index;
    });
  std::vector<SmallVector<Value>> freeAfter(block.getOperations().size());
  for (auto [value, index] : lastUse)
    freeAfter[index].push_back(value);

  llvm::DenseMap<Value, std::unique_ptr<Tensor>> owned;
  for (auto [index, op] : llvm::enumerate(block)) {
    SmallVector<const Tensor *> operands;
    for (Value operand : op.getOperands()) {
      const Tensor *tensor = scope.lookup(operand);
      if (!tensor)
        return op.emitError() << "operand used before it is defined";
      operands.push_back(tensor);
    }
    if (op.hasTrait<mlir::OpTrait::IsTerminator>()) {
      if (!isa<func::ReturnOp, YieldOp>(op))
        return op.emitError()
               << "the evaluator does not support '" << op.getName() << "'";
      std::vector<Tensor> results;
      OperandRange values = op.getOperands();
      for (unsigned i = 0; i < values.size(); ++i) {
        auto own = owned.find(values[i]);
        // A value returned twice is moved only on its last appearance.
        if (own != owned.end() && own->second &&
            !llvm::is_contained(values.drop_front(i + 1), values[i]))
          results.push_back(std::move(*own->second));
        else
          results.push_back(*operands[i]);
      }
      return results;
    }
    SmallVector<Tensor> results;
    LogicalResult status = success();
    if (auto call = dyn_cast<func::CallOp>(op))
      status = evalCall(call, operands, results, frame);
    else if (auto loop = dyn_cast<MicroBatchLoopOp>(op))
      status = evalMicroBatchLoop(loop, operands, results, scope, frame);
    else
      status = evalOp(&op, operands, results, frame.group, frame.rank);
    if (failed(status))
      return failure();
    for (auto [value, tensor] : llvm::zip(op.getResults(), results)) {
      if (value.use_empty())
        continue;
      auto &slot = owned[value];
      slot = std::make_unique<Tensor>(std::move(tensor));
      scope.values[value] = slot.get();
    }
    for (Value value : freeAfter[index]) {
      auto own = owned.find(value);
      if (own != owned.end() && own->second) {
        own->second.reset();
        scope.values.erase(value);
      }
    }
  }
  return emitError(block.getParent()->getLoc())
         << "block has no terminator the evaluator knows";
}

FailureOr<std::vector<Tensor>> sharc::evaluate(func::FuncOp func,
                                               ArrayRef<Tensor> args,
                                               CollectiveGroup *group,
                                               int rank) {
  auto fail = [&]() -> FailureOr<std::vector<Tensor>> {
    if (group)
      group->abort();
    return failure();
  };
  if (group && (rank < 0 || rank >= group->size())) {
    func.emitError() << "rank " << rank << " is not in a group of "
                     << group->size();
    return fail();
  }
  ArrayRef<Type> inputs = func.getArgumentTypes();
  if (inputs.size() != args.size()) {
    func.emitError() << "function '" << func.getSymName() << "' takes "
                     << inputs.size() << " arguments, got " << args.size();
    return fail();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (matchesType(args[i], inputs[i]))
      continue;
    func.emitError() << "argument #" << i << " of '" << func.getSymName()
                     << "' is " << args[i].describe() << ", expected "
                     << describeType(inputs[i]);
    return fail();
  }
  SmallVector<const Tensor *> pointers;
  for (const Tensor &tensor : args)
    pointers.push_back(&tensor);
  if (func.isExternal()) {
    func.emitError() << "cannot evaluate a function without a body";
    return fail();
  }
  if (!func.getBody().hasOneBlock()) {
    func.emitError() << "the evaluator supports single-block functions only";
    return fail();
  }
  Frame frame{group, rank, {func}};
  FailureOr<std::vector<Tensor>> results =
      runBlock(func.getBody().front(), pointers, nullptr, frame);
  if (failed(results))
    return fail();
  if (group)
    group->finish(rank);
  return results;
}

FailureOr<std::vector<std::vector<Tensor>>>
sharc::evaluateRanks(func::FuncOp func,
                     ArrayRef<std::vector<Tensor>> argsPerRank) {
  int ranks = argsPerRank.size();
  if (ranks == 0)
    return func.emitError() << "evaluateRanks needs at least one rank";
  CollectiveGroup group(ranks);
  std::vector<FailureOr<std::vector<Tensor>>> results(ranks, failure());
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back(
        [&, r] { results[r] = evaluate(func, argsPerRank[r], &group, r); });
  for (std::thread &thread : threads)
    thread.join();
  std::vector<std::vector<Tensor>> all;
  for (FailureOr<std::vector<Tensor>> &result : results) {
    if (failed(result))
      return failure();
    all.push_back(std::move(*result));
  }
  return all;
}

FailureOr<std::vector<Tensor>> sharc::evaluateOp(Operation *op,
                                                 ArrayRef<Tensor> operands) {
  if (op->getNumOperands() != operands.size())
    return op->emitError() << "evaluateOp: the op has " << op->getNumOperands()
                           << " operands, got " << operands.size();
  SmallVector<const Tensor *> pointers;
  for (auto [i, tensor] : llvm::enumerate(operands)) {
    if (!matchesType(tensor, op->getOperand(i).getType()))
      return op->emitError()
             << "evaluateOp: operand #" << i << " is " << tensor.describe()
             << ", expected " << describeType(op->getOperand(i).getType());
    pointers.push_back(&tensor);
  }
  SmallVector<Tensor> results;
  if (failed(evalOp(op, pointers, results, nullptr, 0)))
    return failure();
  return std::vector<Tensor>(std::make_move_iterator(results.begin()),
                             std::make_move_iterator(results.end()));
}
