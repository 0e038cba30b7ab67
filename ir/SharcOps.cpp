//===- SharcOps.cpp - sharc dialect --------------------------------------===//
//
// Verifiers and shape functions of the sharc operations.
//
//===----------------------------------------------------------------------===//

#include "ir/SharcOps.h"
#include "ir/OpsInternal.h"
#include "ir/TrainingOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::detail;

#include "ir/SharcDialect.cpp.inc"
#include "ir/SharcEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/SharcAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/SharcTypes.cpp.inc"

void SharcDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/SharcAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/SharcTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "ir/SharcOps.cpp.inc"
      >();
}

/// Checks the sharc attributes shared by arguments and results: a parameter
/// or gradient must be a float tensor, a name must be a string.
static LogicalResult verifySignatureAttribute(Operation *op, Type type,
                                              StringRef what, unsigned index,
                                              NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto fail = [&]() {
    return op->emitError() << what << " #" << index << ": ";
  };
  if (name == SharcDialect::getInputAttrName() ||
      name == SharcDialect::getOutputAttrName() ||
      name == SharcDialect::getGradAttrName()) {
    if (!isa<StringAttr>(attr.getValue()))
      return fail() << "'" << name << "' must be a string";
  } else if (name == SharcDialect::getParamAttrName()) {
    if (!isa<ParamAttr>(attr.getValue()))
      return fail() << "'" << name << "' must be a #sharc.param attribute";
  } else if (name == SharcDialect::getStateAttrName()) {
    if (!isa<StateAttr>(attr.getValue()))
      return fail() << "'" << name << "' must be a #sharc.state attribute";
  } else if (name == SharcDialect::getBufferAttrName()) {
    if (!isa<UnitAttr>(attr.getValue()))
      return fail() << "'" << name << "' must be a unit attribute";
    if (what != "argument")
      return fail() << "'" << name << "' applies to arguments only";
    auto func = dyn_cast<FunctionOpInterface>(op);
    if (func && !func.getArgAttr(index, SharcDialect::getParamAttrName()))
      return fail() << "'" << name
                    << "' applies to parameters (sharc.param) "
                       "only";
  } else if (name == SharcDialect::getRandomKeyAttrName()) {
    auto role = dyn_cast<StringAttr>(attr.getValue());
    auto tensor = dyn_cast_or_null<RankedTensorType>(type);
    bool i64 = tensor && tensor.getElementType().isInteger(64);
    if (!role || (role.getValue() != "step" && role.getValue() != "rows"))
      return fail() << "'" << name << "' must be \"step\" or \"rows\"";
    if (type && role.getValue() == "step" && !(i64 && tensor.getRank() == 0))
      return fail() << "the random key's step must be a tensor<i64>, got "
                    << type;
    if (type && role.getValue() == "rows" && !(i64 && tensor.getRank() == 1))
      return fail() << "the random key's rows must be a 1-D i64 tensor, got "
                    << type;
  } else {
    return fail() << "unknown sharc attribute '" << name << "'";
  }
  if (name == SharcDialect::getParamAttrName() ||
      name == SharcDialect::getGradAttrName()) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !isa<FloatType>(tensor.getElementType()))
      return fail() << "is marked '" << name
                    << "' but is not a floating-point tensor";
  }
  return success();
}

LogicalResult SharcDialect::verifyRegionArgAttribute(Operation *op,
                                                     unsigned regionIndex,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  Region &region = op->getRegion(regionIndex);
  Type type =
      region.empty() ? Type() : region.front().getArgument(argIndex).getType();
  if (attr.getName() == getOutputAttrName() ||
      attr.getName() == getGradAttrName())
    return op->emitError() << "argument #" << argIndex << ": '"
                           << attr.getName().getValue()
                           << "' applies to results only";
  if (!type && (attr.getName() == getParamAttrName()))
    return success();
  if (attr.getName() == getStorageAttrName()) {
    auto storage = dyn_cast<StorageAttr>(attr.getValue());
    if (!storage)
      return op->emitError()
             << "argument #" << argIndex << ": '" << attr.getName().getValue()
             << "' must be a #sharc.storage attribute";
    auto func = dyn_cast<FunctionOpInterface>(op);
    if (!func || !(func.getArgAttr(argIndex, getStateAttrName()) ||
                   (func.getArgAttr(argIndex, getParamAttrName()) &&
                    func.getArgAttr(argIndex, getSliceAttrName()))))
      return op->emitError()
             << "argument #" << argIndex << ": '" << attr.getName().getValue()
             << "' applies to training state (sharc.state) and partitioned "
                "parameters (sharc.param with sharc.slice) only";
    if (region.empty() || storage.getValue() == Storage::device)
      return success();
    if (storage.getValue() == Storage::host)
      return verifyHostValueUses(region.front().getArgument(argIndex));
    // An offloaded argument has no device memory: it is read by swapping it
    // in and written by swapping its new value out, nothing else.
    for (OpOperand &use : region.front().getArgument(argIndex).getUses()) {
      Operation *user = use.getOwner();
      bool swapIn = isa<SwapInStartOp>(user);
      auto swapOut = dyn_cast<SwapOutStartOp>(user);
      // Returned unchanged, it stays in its file.
      bool returned = isa<func::ReturnOp>(user);
      if (!swapIn && !returned && !(swapOut && use.getOperandNumber() == 1))
        return user->emitOpError()
               << "reads argument #" << argIndex << ", which is offloaded ("
               << storage << "); read it through 'sharc.swap_in_start'";
    }
    return success();
  }
  if (attr.getName() == getSliceAttrName()) {
    // The argument is a slice of the whole: ceil(n / N) elements of its type.
    auto slice = dyn_cast<SliceAttr>(attr.getValue());
    if (!slice)
      return op->emitError()
             << "argument #" << argIndex << ": '" << attr.getName().getValue()
             << "' must be a #sharc.slice attribute";
    if (slice.getRanks() < 2 ||
        slice.getRanks() > TrainingOptions::kMaxWorldSize)
      return op->emitError() << "argument #" << argIndex << ": " << slice
                             << ": ranks must be in [2, "
                             << TrainingOptions::kMaxWorldSize << "]";
    if (type && type != slice.getSliceType())
      return op->emitError()
             << "argument #" << argIndex << " of type " << type << " is not "
             << "a slice of " << slice << ", which is a "
             << slice.getSliceType();
    return success();
  }
  return verifySignatureAttribute(op, type, "argument", argIndex, attr);
}

LogicalResult SharcDialect::verifyRegionResultAttribute(Operation *op,
                                                        unsigned regionIndex,
                                                        unsigned resultIndex,
                                                        NamedAttribute attr) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  Type type = func ? func.getResultTypes()[resultIndex] : Type();
  if (attr.getName() == getInputAttrName())
    return op->emitError() << "result #" << resultIndex << ": '"
                           << attr.getName().getValue()
                           << "' applies to arguments only";
  return verifySignatureAttribute(op, type, "result", resultIndex, attr);
}

/// Checks `array`, a per-result or per-operand index list of `op`: `size`
/// entries, each -1 (when `allowNone`) or in [0, `limit`).
static LogicalResult checkIndexList(Operation *op, StringRef name,
                                    Attribute attr, size_t size, int64_t limit,
                                    bool allowNone, StringRef what) {
  auto array = dyn_cast<DenseI64ArrayAttr>(attr);
  if (!array)
    return op->emitError() << "'" << name << "' must be an array<i64>";
  if (static_cast<size_t>(array.size()) != size)
    return op->emitError() << "'" << name << "' has " << array.size()
                           << " entries for " << size << " " << what;
  for (int64_t value : array.asArrayRef())
    if (value >= limit || value < (allowNone ? -1 : 0))
      return op->emitError()
             << "'" << name << "' entry " << value << " is out of range";
  return success();
}

LogicalResult SharcDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  // The decisions passes hand to the code generator (docs/passes.md): each
  // name has one meaning and one form, checked here, so that a malformed
  // hand-off is an error at the op instead of wrong code.
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  auto nonNegative = [&]() -> LogicalResult {
    auto integer = dyn_cast<IntegerAttr>(value);
    if (!integer || integer.getInt() < 0)
      return op->emitError()
             << "'" << name << "' must be a non-negative integer";
    return success();
  };
  if (name == "sharc.fuse_into" || name == "sharc.gemm_output") {
    if (!isa<UnitAttr>(value))
      return op->emitError() << "'" << name << "' must be a unit attribute";
    if (name == "sharc.gemm_output" && !isa<TransposeOp>(op))
      return op->emitError() << "'" << name << "' applies to transposes only";
    return success();
  }
  if (name == "sharc.on_host") {
    // ZeRO-Offload to the CPU: a kernel run by the host's threads, on values
    // in host memory only (splat constants are inside a fusion's body).
    if (!isa<UnitAttr>(value) ||
        !isa<FusionOp, SwapInStartOp, SwapOutStartOp>(op))
      return op->emitError() << "'" << name
                             << "' is a unit attribute of sharc.fusion, "
                                "sharc.swap_in_start or sharc.swap_out_start";
    // An NVMe read into host memory: its wait's readers are checked.
    if (auto swapIn = dyn_cast<SwapInStartOp>(op)) {
      if (!swapIn.getFuture().hasOneUse())
        return success(); // the op's verifier reports it
      return verifyHostValueUses(
          (*swapIn.getFuture().user_begin())->getResult(0));
    }
    // An NVMe write from host memory: its operand is there.
    if (auto swapOut = dyn_cast<SwapOutStartOp>(op)) {
      if (!isHostValue(swapOut.getValue()))
        return op->emitError() << "writes to NVMe from host memory "
                                  "(sharc.on_host) but its value is in "
                                  "device memory";
      return success();
    }
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      if (!isHostValue(operand))
        return op->emitError()
               << "runs on the host (sharc.on_host) but operand #" << i
               << " is in device memory; transfer it to the host first "
                  "(sharc.transfer_start)";
    for (Value result : op->getResults())
      if (failed(verifyHostValueUses(result)))
        return failure();
    return success();
  }
  if (name == "sharc.parameter_gather") {
    if (!isa<UnitAttr>(value) || !isa<AllGatherOp, AllGatherStartOp>(op))
      return op->emitError() << "'" << name
                             << "' is a unit attribute of sharc.all_gather "
                                "or sharc.all_gather_start";
    return success();
  }
  if (name == "sharc.offsets")
    return checkIndexList(op, name, value, op->getNumResults(),
                          std::numeric_limits<int64_t>::max(),
                          /*allowNone=*/true, "results");
  if (name == "sharc.result_buffers") {
    auto func = op->getParentOfType<FunctionOpInterface>();
    int64_t args = func ? func.getNumArguments() : 0;
    return checkIndexList(op, name, value, op->getNumResults(), args,
                          /*allowNone=*/true, "results");
  }
  if (name == "sharc.scratch_bytes" || name == "sharc.scratch_offset")
    return nonNegative();
  if (name == "sharc.world_size") {
    auto ranks = dyn_cast<IntegerAttr>(value);
    if (!isa<FunctionOpInterface>(op) || !ranks || ranks.getInt() < 1 ||
        ranks.getInt() > TrainingOptions::kMaxWorldSize)
      return op->emitError()
             << "'" << name << "' must be an integer in [1, "
             << TrainingOptions::kMaxWorldSize << "] on a function";
    return success();
  }
  if (name == "sharc.zero_stage") {
    auto stage = dyn_cast<IntegerAttr>(value);
    if (!isa<FunctionOpInterface>(op) || !stage || stage.getInt() < 0 ||
        stage.getInt() > TrainingOptions::kMaxZeroStage)
      return op->emitError()
             << "'" << name << "' must be an integer in [0, "
             << TrainingOptions::kMaxZeroStage << "] on a function";
    return success();
  }
  if (name == "sharc.arena_bytes" || name == "sharc.host_arena_bytes") {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << name << "' applies to functions only";
    return nonNegative();
  }
  if (name == "sharc.gemm_epilogue") {
    auto epilogue = dyn_cast<GemmEpilogueAttr>(value);
    if (!epilogue)
      return op->emitError()
             << "'" << name << "' must be a #sharc.gemm_epilogue attribute";
    int64_t operands = op->getNumOperands(), results = op->getNumResults();
    int64_t product = epilogue.getProduct(), bias = epilogue.getBias(),
            result = epilogue.getResult(), aux = epilogue.getAux();
    auto describe = [&]() {
      return op->emitError() << "'" << name << "' " << epilogue << ": ";
    };
    if (product < 0 || product >= operands)
      return describe() << "product is not an operand of the op";
    if (bias < -1 || bias >= operands || bias == product)
      return describe() << "bias is neither -1 nor another operand";
    if (result < 0 || result >= results)
      return describe() << "result is not a result of the op";
    if (aux < -1 || aux >= results || aux == result)
      return describe() << "aux is neither -1 nor another result";
    if (aux >= 0 && epilogue.getActivation() == GemmActivation::none)
      return describe() << "a pre-activation output needs an activation";
    return success();
  }
  return op->emitError() << "unknown attribute '" << name << "'";
}

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int64_t>> sharc::broadcastShapes(ArrayRef<int64_t> lhs,
                                                       ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t b = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (a != b && a != 1 && b != 1)
      return failure();
    result[i] = a == 1 ? b : a;
  }
  return result;
}

bool sharc::isBroadcastableTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[offset + i])
      return false;
  return true;
}

int64_t sharc::windowOutputSize(int64_t input, int64_t kernel, int64_t stride,
                                int64_t padBegin, int64_t padEnd,
                                int64_t dilation, bool ceilMode) {
  int64_t span = dilation * (kernel - 1) + 1;
  int64_t room = input + padBegin + padEnd - span;
  if (room < 0)
    return 0;
  int64_t out = (ceilMode ? (room + stride - 1) / stride : room / stride) + 1;
  // As in PyTorch and ONNX: the last window must start inside the input or
  // the left padding.
  if (ceilMode && (out - 1) * stride >= input + padBegin)
    --out;
  return out;
}

sharc::WindowGeometry::WindowGeometry(ArrayRef<int64_t> input,
                                      ArrayRef<int64_t> output,
                                      ArrayRef<int64_t> kernel,
                                      ArrayRef<int64_t> strides,
                                      ArrayRef<int64_t> padding,
                                      ArrayRef<int64_t> dilations)
    : batch(input[0]), channels(input[1]), outChannels(output[1]),
      height(input[2]), width(input[3]), outHeight(output[2]),
      outWidth(output[3]), kernelH(kernel[0]), kernelW(kernel[1]),
      strideH(strides[0]), strideW(strides[1]), padTop(padding[0]),
      padLeft(padding[1]), padBottom(padding[2]), padRight(padding[3]) {
  if (!dilations.empty()) {
    dilationH = dilations[0];
    dilationW = dilations[1];
  }
}

std::optional<int64_t> sharc::checkedNumElements(ArrayRef<int64_t> shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank)
    return std::nullopt;
  int64_t product = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(product, d, &product) || product > kMaxElements)
      return std::nullopt;
  }
  return empty ? 0 : product;
}

int64_t sharc::numElements(ArrayRef<int64_t> shape) {
  return checkedNumElements(shape).value_or(
      std::numeric_limits<int64_t>::max());
}

LogicalResult sharc::verifyStaticShapes(Operation *root) {
  auto check = [](Operation *op, Type type,
                  const Twine &what) -> LogicalResult {
    auto tensor = dyn_cast<TensorType>(type);
    if (!tensor)
      return success();
    if (!tensor.hasRank() || !tensor.hasStaticShape())
      return op->emitError() << what << " has type " << type
                             << ": sharc needs static shapes (give "
                                "--input-shape for an ONNX model's symbolic "
                                "dimensions)";
    if (!checkedNumElements(tensor.getShape()))
      return op->emitError()
             << what << " has type " << type << ": more than " << kMaxElements
             << " elements or " << kMaxRank << " dimensions";
    return success();
  };
  WalkResult result = root->walk([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          if (failed(check(op, arg.getType(),
                           "argument #" + Twine(arg.getArgNumber()))))
            return WalkResult::interrupt();
    for (OpResult result : op->getResults())
      if (failed(check(op, result.getType(),
                       "result #" + Twine(result.getResultNumber()))))
        return WalkResult::interrupt();
    if (auto func = dyn_cast<FunctionOpInterface>(op))
      for (auto [i, type] : llvm::enumerate(func.getResultTypes()))
        if (failed(check(op, type, "function result #" + Twine(i))))
          return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

SmallVector<int64_t> sharc::rowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Argument `index`'s attribute `name` of function `op`, if it is an `Attr`.
template <typename Attr>
static Attr getArgAttr(Operation *op, unsigned index, StringRef name) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  return func ? func.getArgAttrOfType<Attr>(index, name) : Attr();
}

ParamAttr sharc::getParamAttr(Operation *op, unsigned index) {
  return getArgAttr<ParamAttr>(op, index, SharcDialect::getParamAttrName());
}

bool sharc::isBuffer(Operation *op, unsigned index) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  return func && func.getArgAttr(index, SharcDialect::getBufferAttrName());
}

StringRef sharc::getRandomKeyRole(Operation *op, unsigned index) {
  auto role =
      getArgAttr<StringAttr>(op, index, SharcDialect::getRandomKeyAttrName());
  return role ? role.getValue() : StringRef();
}

SliceAttr sharc::getSliceAttr(Operation *op, unsigned index) {
  return getArgAttr<SliceAttr>(op, index, SharcDialect::getSliceAttrName());
}

BlockArgument sharc::getGatheredSliceArgument(Operation *gather) {
  Value source = gather->getOperand(0);
  while (Operation *def = source.getDefiningOp()) {
    if (!isa<ReshapeOp, CastOp>(def))
      return {};
    source = def->getOperand(0);
  }
  auto arg = dyn_cast<BlockArgument>(source);
  Operation *func = arg ? arg.getOwner()->getParentOp() : nullptr;
  if (!func || !isa<FunctionOpInterface>(func) ||
      !getSliceAttr(func, arg.getArgNumber()))
    return {};
  return arg;
}

Operation *sharc::getLastGatheredReader(Value gathered, Block &block) {
  Operation *last = block.findAncestorOpInBlock(*gathered.getDefiningOp());
  SmallVector<Value> values = {gathered};
  while (!values.empty()) {
    Value value = values.pop_back_val();
    for (Operation *user : value.getUsers()) {
      Operation *top = block.findAncestorOpInBlock(*user);
      if (!top)
        continue;
      if (!last || last->isBeforeInBlock(top))
        last = top;
      if (isa<ReshapeOp, SliceOp>(top) || top->hasAttr("sharc.fuse_into"))
        llvm::append_range(values, top->getResults());
    }
  }
  return last;
}

std::optional<unsigned> sharc::getUpdatedArgument(Operation *op,
                                                  unsigned result) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func)
    return std::nullopt;
  for (StringRef name :
       {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()}) {
    Attribute attr = func.getResultAttr(result, name);
    if (!attr)
      continue;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (func.getArgAttr(i, name) == attr)
        return i;
  }
  return std::nullopt;
}

bool sharc::isHostValue(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func =
        dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
    if (!func || arg.getOwner() != &func.getFunctionBody().front())
      return false;
    auto storage = func.getArgAttrOfType<StorageAttr>(
        arg.getArgNumber(), SharcDialect::getStorageAttrName());
    return storage && storage.getValue() == Storage::host;
  }
  Operation *def = value.getDefiningOp();
  if (def->hasAttr("sharc.on_host"))
    return true;
  if (auto reshape = dyn_cast<ReshapeOp>(def))
    return isHostValue(reshape.getOperand());
  if (auto wait = dyn_cast<WaitOp>(def)) {
    Operation *start = wait.getFuture().getDefiningOp();
    if (auto transfer = dyn_cast<TransferStartOp>(start))
      return transfer.getTo() == Storage::host;
    // An NVMe read into host memory.
    return start->hasAttr("sharc.on_host");
  }
  return false;
}

LogicalResult sharc::verifyHostValueUses(Value value) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (user->hasAttr("sharc.on_host"))
      continue;
    if (isa<ReshapeOp>(user)) {
      if (failed(verifyHostValueUses(user->getResult(0))))
        return failure();
      continue;
    }
    if (auto transfer = dyn_cast<TransferStartOp>(user);
        transfer && transfer.getTo() == Storage::device)
      continue;
    if (isa<func::ReturnOp>(user)) {
      // Written into the buffer of state kept in host memory.
      auto func = user->getParentOfType<FunctionOpInterface>();
      std::optional<unsigned> updated =
          getUpdatedArgument(func, use.getOperandNumber());
      StorageAttr storage =
          updated ? func.getArgAttrOfType<StorageAttr>(
                        *updated, SharcDialect::getStorageAttrName())
                  : StorageAttr();
      if (storage && storage.getValue() == Storage::host)
        continue;
      return user->emitOpError()
             << "returns a value in host memory as result #"
             << use.getOperandNumber()
             << ", whose buffer is device memory; transfer it to the device "
                "first (sharc.transfer_start)";
    }
    return user->emitOpError()
           << "reads a value in host memory but does not run on the host "
              "(sharc.on_host); transfer it to the device first "
              "(sharc.transfer_start)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

Operation *SharcDialect::materializeConstant(OpBuilder &builder,
                                             Attribute value, Type type,
                                             Location loc) {
  // A folded value (reshape of a constant, ...) becomes a sharc.constant of
  // the result's type.
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, type, elements);
}

LogicalResult IotaOp::verify() {
  int64_t rank = getType().getRank();
  if (getDimension() < 0 || getDimension() >= rank)
    return emitOpError() << "dimension " << getDimension()
                         << " is out of range for rank " << rank;
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Shape function shared by the broadcasting ops: all operands broadcast
/// together; the result has `elementType`, or the operands' common element
/// type when `elementType` is null (then they must agree).
static LogicalResult inferBroadcast(std::optional<Location> loc,
                                    ValueRange operands, Type elementType,
                                    SmallVectorImpl<Type> &results,
                                    bool sameElementTypes = true) {
  SmallVector<int64_t> shape;
  Type common;
  for (Value operand : operands) {
    auto type = tensorType(operand);
    auto merged = broadcastShapes(shape, type.getShape());
    if (failed(merged))
      return emitOptionalError(loc, "operand shapes ", operands.getTypes(),
                               " do not broadcast");
    shape = *merged;
    if (sameElementTypes && common && common != type.getElementType())
      return emitOptionalError(
          loc, "operand element types differ: ", operands.getTypes());
    common = type.getElementType();
  }
  results.push_back(
      RankedTensorType::get(shape, elementType ? elementType : common));
  return success();
}

#define SHARC_BINARY_INFER(OP)                                                 \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    return inferBroadcast(loc, {adaptor.getLhs(), adaptor.getRhs()}, Type(),   \
                          results);                                            \
  }
SHARC_BINARY_INFER(AddOp)
SHARC_BINARY_INFER(SubOp)
SHARC_BINARY_INFER(MulOp)
SHARC_BINARY_INFER(DivOp)
SHARC_BINARY_INFER(PowOp)
SHARC_BINARY_INFER(MaxOp)
SHARC_BINARY_INFER(MinOp)
SHARC_BINARY_INFER(AndOp)
SHARC_BINARY_INFER(OrOp)
#undef SHARC_BINARY_INFER

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  return inferBroadcast(loc, {adaptor.getLhs(), adaptor.getRhs()},
                        IntegerType::get(context, 1), results);
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  SmallVector<Type> ignored;
  if (failed(inferBroadcast(loc, {adaptor.getOnTrue(), adaptor.getOnFalse()},
                            Type(), ignored)))
    return failure();
  return inferBroadcast(
      loc, {adaptor.getCondition(), adaptor.getOnTrue(), adaptor.getOnFalse()},
      tensorType(adaptor.getOnTrue()).getElementType(), results,
      /*sameElementTypes=*/false);
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  return {};
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

bool sharc::isFusibleElementwiseOp(Operation *op) {
  return op->hasTrait<sharc::OpTrait::FusibleElementwise>();
}

bool sharc::isSplatConstant(Operation *op) {
  auto constant = dyn_cast<ConstantOp>(op);
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  return dense && dense.isSplat();
}

bool sharc::isFusionLeaf(Operation *op) {
  return isSplatConstant(op) || isa<IotaOp>(op);
}

YieldOp FusionOp::getYield() {
  return cast<YieldOp>(getBody().front().getTerminator());
}

LogicalResult FusionOp::verifyRegions() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getNumOperands())
    return emitOpError() << "has " << getNumOperands()
                         << " operands but its body has "
                         << body.getNumArguments() << " arguments";
  for (auto [i, operand, arg] :
       llvm::enumerate(getOperands(), body.getArguments()))
    if (operand.getType() != arg.getType())
      return emitOpError() << "body argument #" << i << " has type "
                           << arg.getType() << " but operand #" << i
                           << " has type " << operand.getType();

  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with 'sharc.yield'";
  if (yield.getNumOperands() != getNumResults())
    return emitOpError() << "yields " << yield.getNumOperands()
                         << " values but has " << getNumResults() << " results";
  for (auto [i, value, result] :
       llvm::enumerate(yield.getOperands(), getResults()))
    if (value.getType() != result.getType())
      return emitOpError() << "yielded value #" << i << " has type "
                           << value.getType() << " but result #" << i
                           << " has type " << result.getType();

  if (getNumResults() == 0)
    return emitOpError() << "must have at least one result";
  ArrayRef<int64_t> shape = getIterationShape();
  for (auto [i, result] : llvm::enumerate(getResults()))
    if (tensorType(result).getShape() != shape)
      return emitOpError() << "result #" << i << " has shape "
                           << shapeString(tensorType(result).getShape())
                           << " but the iteration shape (of result #0) is "
                           << shapeString(shape);
  for (auto [i, operand] : llvm::enumerate(getOperands()))
    if (!isBroadcastableTo(tensorType(operand).getShape(), shape))
      return emitOpError() << "operand #" << i << " of shape "
                           << shapeString(tensorType(operand).getShape())
                           << " does not broadcast to the iteration shape "
                           << shapeString(shape);

  for (Operation &op : body.without_terminator()) {
    if (isa<ConstantOp>(op)) {
      if (!isSplatConstant(&op))
        return op.emitOpError()
               << "in a 'sharc.fusion' body must be a splat constant";
    } else if (!isFusionLeaf(&op) && !isFusibleElementwiseOp(&op)) {
      return op.emitOpError() << "is not an elementwise op and cannot be in "
                                 "a 'sharc.fusion' body";
    }
    for (Value result : op.getResults())
      if (!isBroadcastableTo(tensorType(result).getShape(), shape))
        return op.emitOpError()
               << "result of shape "
               << shapeString(tensorType(result).getShape())
               << " does not broadcast to the iteration shape "
               << shapeString(shape) << " of its 'sharc.fusion'";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

YieldOp MicroBatchLoopOp::getYield() {
  return cast<YieldOp>(getBody().front().getTerminator());
}

LogicalResult MicroBatchLoopOp::verifyRegions() {
  Block &body = getBody().front();
  size_t numInputs = getInputs().size(), numInits = getInits().size();
  if (body.getNumArguments() != numInputs + numInits)
    return emitOpError() << "has " << numInputs << " inputs and " << numInits
                         << " inits but its body has " << body.getNumArguments()
                         << " arguments";
  int64_t count = getCount();
  for (auto [i, input, arg] :
       llvm::enumerate(getInputs(), getMicroBatchArgs())) {
    auto type = tensorType(input);
    if (type.getRank() == 0 || type.getDimSize(0) % count != 0)
      return emitOpError() << "input #" << i << " of shape "
                           << shapeString(type.getShape())
                           << " does not split into " << count
                           << " micro-batches along dimension 0";
    SmallVector<int64_t> micro(type.getShape());
    micro[0] /= count;
    if (arg.getType() != type.clone(micro))
      return emitOpError() << "body argument #" << i << " has type "
                           << arg.getType() << " but micro-batches of input #"
                           << i << " have type " << type.clone(micro);
  }
  if (getNumResults() != numInits)
    return emitOpError() << "has " << numInits << " inits but "
                         << getNumResults() << " results";
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with 'sharc.yield'";
  if (yield.getNumOperands() != numInits)
    return emitOpError() << "yields " << yield.getNumOperands()
                         << " values but carries " << numInits;
  for (auto [i, init, arg, value, result] : llvm::enumerate(
           getInits(), getCarriedArgs(), yield.getOperands(), getResults()))
    if (arg.getType() != init.getType() || value.getType() != init.getType() ||
        result.getType() != init.getType())
      return emitOpError() << "carried value #" << i
                           << " must have one type as init, body argument, "
                              "yielded value and result; got "
                           << init.getType() << ", " << arg.getType() << ", "
                           << value.getType() << ", " << result.getType();
  return success();
}

LogicalResult GradientsOp::verify() {
  if (getParams().size() != getValues().size())
    return emitOpError() << "has " << getValues().size()
                         << " gradients but names " << getParams().size()
                         << " parameters";
  llvm::StringSet<> seen;
  for (Attribute name : getParams())
    if (!seen.insert(cast<StringAttr>(name).getValue()).second)
      return emitOpError() << "names parameter '"
                           << cast<StringAttr>(name).getValue() << "' twice";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

static LogicalResult checkRanks(std::optional<Location> loc, int64_t ranks) {
  if (ranks < 1)
    return emitOptionalError(loc, "group size must be positive, got ", ranks);
  return success();
}

LogicalResult AllReduceOp::verify() { return checkRanks(getLoc(), getRanks()); }

/// One wait, beside the start: the code generator matches each start with
/// its wait within one block, and a future read twice has no single end.
static LogicalResult verifyWaitedOnce(Operation *start, Value future) {
  if (!future.hasOneUse())
    return start->emitOpError()
           << "must be waited for exactly once, by one 'sharc.wait'; its "
              "future has "
           << std::distance(future.use_begin(), future.use_end()) << " uses";
  Operation *user = *future.user_begin();
  if (!isa<WaitOp>(user))
    return start->emitOpError() << "future is used by '" << user->getName()
                                << "'; only 'sharc.wait' may read it";
  if (user->getBlock() != start->getBlock())
    return start->emitOpError() << "is waited for in another block";
  return success();
}

LogicalResult AllReduceStartOp::verify() {
  if (failed(checkRanks(getLoc(), getRanks())))
    return failure();
  return verifyWaitedOnce(*this, getFuture());
}

LogicalResult ReduceScatterStartOp::verify() {
  return verifyWaitedOnce(*this, getFuture());
}

LogicalResult FutureType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 RankedTensorType valueType) {
  if (!valueType.hasStaticShape())
    return emitError() << "'!sharc.future' holds a statically shaped tensor, "
                          "not "
                       << valueType;
  return success();
}

RankedTensorType sharc::storedTensorType(Type type) {
  if (auto future = dyn_cast<FutureType>(type))
    return future.getValueType();
  return dyn_cast<RankedTensorType>(type);
}

/// The type of one rank's slice of dimension 0 of `operand` over `ranks`
/// ranks (reduce_scatter, shard), or an error naming `op`.
static LogicalResult inferRankSlice(std::optional<Location> loc, StringRef op,
                                    Value operand, int64_t ranks,
                                    SmallVectorImpl<Type> &results) {
  auto type = tensorType(operand);
  if (failed(checkRanks(loc, ranks)))
    return failure();
  if (type.getRank() < 1 || type.getDimSize(0) % ranks != 0)
    return emitOptionalError(loc, op, " needs dimension 0 of ", type,
                             " to be a multiple of the group size ", ranks);
  SmallVector<int64_t> shape(type.getShape());
  shape[0] /= ranks;
  results.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult
ReduceScatterOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  return inferRankSlice(loc, "reduce_scatter", adaptor.getOperand(),
                        adaptor.getRanks(), results);
}

LogicalResult ReduceScatterStartOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  if (failed(inferRankSlice(loc, "reduce_scatter_start", adaptor.getOperand(),
                            adaptor.getRanks(), results)))
    return failure();
  results.back() = FutureType::get(cast<RankedTensorType>(results.back()));
  return success();
}

/// The result of an all-gather of `operand` over `ranks` ranks: dimension 0
/// `ranks` times longer.
static LogicalResult inferGathered(std::optional<Location> loc, Value operand,
                                   int64_t ranks,
                                   SmallVectorImpl<Type> &results) {
  auto type = tensorType(operand);
  if (failed(checkRanks(loc, ranks)))
    return failure();
  if (type.getRank() < 1)
    return emitOptionalError(loc, "all_gather needs a tensor of rank >= 1");
  SmallVector<int64_t> shape(type.getShape());
  shape[0] *= ranks;
  results.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult AllGatherOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  return inferGathered(loc, adaptor.getOperand(), adaptor.getRanks(), results);
}

LogicalResult
AllGatherStartOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                   Adaptor adaptor,
                                   SmallVectorImpl<Type> &results) {
  if (failed(inferGathered(loc, adaptor.getOperand(), adaptor.getRanks(),
                           results)))
    return failure();
  results.back() = FutureType::get(cast<RankedTensorType>(results.back()));
  return success();
}

LogicalResult AllGatherStartOp::verify() {
  return verifyWaitedOnce(*this, getFuture());
}

/// The argument marked `sharc.storage = #sharc.storage<nvme>` of the
/// function enclosing `op` that `value` is, or an error naming `what`.
static LogicalResult checkOffloadedArgument(Operation *op, Value value,
                                            StringRef what) {
  auto arg = dyn_cast<BlockArgument>(value);
  auto func = op->getParentOfType<FunctionOpInterface>();
  if (!arg || !func || arg.getOwner() != &func.getFunctionBody().front())
    return op->emitOpError() << what << " must be an argument of the "
                             << "enclosing function";
  auto storage = func.getArgAttrOfType<StorageAttr>(
      arg.getArgNumber(), SharcDialect::getStorageAttrName());
  if (!storage || storage.getValue() != Storage::nvme)
    return op->emitOpError() << what << " (argument #" << arg.getArgNumber()
                             << ") is not marked 'sharc.storage = "
                                "#sharc.storage<nvme>'";
  return success();
}

LogicalResult SwapInStartOp::verify() {
  if (failed(checkOffloadedArgument(*this, getOperand(), "the operand")))
    return failure();
  return verifyWaitedOnce(*this, getFuture());
}

LogicalResult SwapOutStartOp::verify() {
  if (failed(checkOffloadedArgument(*this, getTarget(), "the target")) ||
      failed(verifyWaitedOnce(*this, getFuture())))
    return failure();
  // The stored value is in the file: only the function's return may name it.
  Value stored = (*getFuture().user_begin())->getResult(0);
  for (Operation *user : stored.getUsers())
    if (!isa<func::ReturnOp>(user))
      return emitOpError() << "stored value is read by '" << user->getName()
                           << "'; only the function's return may name it "
                              "(read it back with sharc.swap_in_start)";
  return success();
}

LogicalResult TransferStartOp::verify() {
  if (getTo() == Storage::nvme)
    return emitOpError() << "transfers between device and host memory; "
                            "NVMe is reached through sharc.swap_in_start and "
                            "sharc.swap_out_start";
  if (failed(verifyWaitedOnce(*this, getFuture())))
    return failure();
  bool toHost = getTo() == Storage::host;
  if (isHostValue(getOperand()) == toHost)
    return emitOpError() << "copies a value already in "
                         << (toHost ? "host" : "device") << " memory to "
                         << (toHost ? "the host" : "the device");
  if (toHost)
    return verifyHostValueUses((*getFuture().user_begin())->getResult(0));
  return success();
}

LogicalResult ShardOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  return inferRankSlice(loc, "shard", adaptor.getOperand(), adaptor.getRanks(),
                        results);
}

LogicalResult BroadcastFromOp::verify() {
  if (failed(checkRanks(getLoc(), getRanks())))
    return failure();
  if (getRoot() < 0 || getRoot() >= getRanks())
    return emitOpError() << "root " << getRoot()
                         << " is not a rank of a group of " << getRanks();
  return success();
}

#define GET_OP_CLASSES
#include "ir/SharcOps.cpp.inc"
