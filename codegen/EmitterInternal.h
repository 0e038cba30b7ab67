//===- EmitterInternal.h - Shared by the emitter's files -------*- C++ -*-===//
//
// The program emitter's class and text helpers, shared by Emitter.cpp (the
// walk, elementwise groups, data movement, GEMMs, reductions, collectives)
// and EmitNN.cpp (convolution and pooling kernels).
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_CODEGEN_EMITTERINTERNAL_H
#define SHARC_CODEGEN_EMITTERINTERNAL_H

#include "codegen/Emitter.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include "llvm/ADT/StringSet.h"
#include <cmath>

#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace sharc::codegen {

using namespace mlir;

inline std::string str(int64_t value) { return std::to_string(value); }

/// A double as a C++ expression of type double that reads back exactly.
inline std::string doubleLiteral(double value) {
  if (std::isnan(value))
    return "static_cast<double>(NAN)";
  if (std::isinf(value))
    return value > 0 ? "HUGE_VAL" : "(-HUGE_VAL)";
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  std::string text = buffer;
  if (text.find_first_of(".eE") == std::string::npos)
    text += ".0";
  return text;
}

/// An f32 value (given as a double) as a C++ expression of type float (a
/// constant expression, short: a constant tensor's array holds one per
/// element).
inline std::string floatLiteral(double value) {
  if (std::isnan(value))
    return "NAN";
  if (std::isinf(value))
    return value > 0 ? "HUGE_VALF" : "(-HUGE_VALF)";
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  std::string text = buffer;
  if (text.find_first_of(".eE") == std::string::npos)
    text += ".0";
  return text + "f";
}

inline std::string intLiteral(int64_t value) {
  if (value == std::numeric_limits<int64_t>::min())
    return "(-INT64_C(9223372036854775807) - 1)";
  return "INT64_C(" + std::to_string(value) + ")";
}

inline bool isFloatType(Type t) { return isa<FloatType>(t); }

/// The C++ type elementwise kernels compute an element type in: f32 in float
/// (see ProgramEmitter::scalarExpr), f64 in double, integers and booleans in
/// int64_t.
inline std::string scalarType(Type t) {
  // f16 and bf16 values are computed on as float (runtime/Kernels.h).
  if (t.isF32() || t.isF16() || t.isBF16())
    return "float";
  return isFloatType(t) ? "double" : "int64_t";
}

/// The C++ storage type of an element type, or "" when unsupported.
inline std::string storageType(Type t) {
  if (t.isF32())
    return "float";
  if (t.isF16())
    return "sharc::kern::f16";
  if (t.isBF16())
    return "sharc::kern::bf16";
  if (t.isF64())
    return "double";
  if (t.isInteger(1))
    return "bool";
  if (t.isInteger(32))
    return "int32_t";
  if (t.isInteger(64))
    return "int64_t";
  return "";
}

/// The runtime DType enumerator of an element type (runtime/DType.h).
inline std::string dtypeEnumerator(Type t) {
  if (t.isF32())
    return "f32";
  if (t.isF64())
    return "f64";
  if (t.isF16())
    return "f16";
  if (t.isBF16())
    return "bf16";
  if (t.isInteger(1))
    return "i1";
  if (t.isInteger(32))
    return "i32";
  return "i64";
}

inline int64_t elementBytes(Type t) {
  return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8;
}

/// The tensor `v` is, or (a `!sharc.future`) will hold.
inline RankedTensorType tensorType(Value v) {
  RankedTensorType type = storedTensorType(v.getType());
  assert(type && "a value of the emitted IR that is not a tensor");
  return type;
}
inline Type elementOf(Value v) { return tensorType(v).getElementType(); }

/// `(index / divisor) % modulus` for an index below `count`; a divisor of 1
/// is left out, and so is the remainder when `modulus` is 0 (none).  x86 has
/// no 64-bit vector division, so a kernel loop whose index is divided by
/// anything but a power of two (which is a shift) stays scalar; when every
/// index fits in 32 bits that arithmetic is done in unsigned 32 bits, which
/// vectorizes (a multiply-high by the reciprocal).
inline std::string divMod(StringRef index, int64_t divisor, int64_t modulus,
                          int64_t count) {
  if (modulus == 1)
    return "INT64_C(0)";
  auto isPowerOf2 = [](int64_t v) { return (v & (v - 1)) == 0; };
  bool narrow = count <= int64_t(UINT32_MAX) &&
                !(isPowerOf2(divisor) && isPowerOf2(modulus));
  std::string suffix = narrow ? "u" : "";
  std::string expr = narrow ? "uint32_t(" + index.str() + ")" : index.str();
  if (divisor != 1)
    expr += " / " + str(divisor) + suffix;
  if (modulus != 0)
    expr += " % " + str(modulus) + suffix;
  return narrow ? "int64_t(" + expr + ")" : "(" + expr + ")";
}

/// The offset into a tensor of shape `from` (numpy-broadcast to `to`) of the
/// element at flat index `index` of `to`.  Runs of adjacent dimensions that
/// are not broadcast are one coordinate (one division and one remainder;
/// divMod).
inline std::string broadcastIndex(ArrayRef<int64_t> from, ArrayRef<int64_t> to,
                                  StringRef index = "i") {
  if (from == to)
    return index.str();
  if (numElements(from) == 1)
    return "0";
  SmallVector<int64_t> toStrides = rowMajorStrides(to);
  SmallVector<int64_t> fromStrides = rowMajorStrides(from);
  size_t lead = to.size() - from.size();
  std::string expr;
  for (size_t d = lead; d < to.size();) {
    if (from[d - lead] == 1) {
      ++d;
      continue;
    }
    // [first, d) is a run of dimensions `from` keeps (size-1 ones included).
    size_t first = d;
    int64_t extent = 1;
    size_t last = d;
    for (; d < to.size() && (from[d - lead] != 1 || to[d] == 1); ++d) {
      extent *= to[d];
      if (to[d] != 1)
        last = d;
    }
    std::string coord = divMod(index, toStrides[last], first != 0 ? extent : 0,
                               numElements(to));
    if (fromStrides[last - lead] != 1)
      coord += " * " + str(fromStrides[last - lead]);
    expr += (expr.empty() ? "" : " + ") + coord;
  }
  return expr.empty() ? "0" : expr;
}

/// The index along dimension `dim` of the element at flat position `index`
/// of `type` (a `sharc.iota`'s value), for a launch of `count` elements.
inline std::string iotaIndex(RankedTensorType type, int64_t dim,
                             StringRef index, int64_t count) {
  return divMod(index, numElements(type.getShape().drop_front(dim + 1)),
                dim != 0 ? type.getDimSize(dim) : 0, count);
}

/// Statements that decompose flat index `index` of `shape` into coordinate
/// variables `<prefix>0`, `<prefix>1`, ...
inline std::string coordinates(ArrayRef<int64_t> shape, StringRef index,
                               StringRef prefix) {
  std::string code;
  SmallVector<int64_t> strides = rowMajorStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    code +=
        "    const int64_t " + prefix.str() + str(d) + " = " +
        divMod(index, strides[d], d != 0 ? shape[d] : 0, numElements(shape)) +
        ";\n";
  return code;
}

//===----------------------------------------------------------------------===//
// Kernels under construction
//===----------------------------------------------------------------------===//

/// A functor being built: its members (pointers to the tensors it touches)
/// and the body of `operator()(int64_t i)`.
struct KernelText {
  std::vector<std::string> members;
  std::vector<std::string> arguments;
  /// Member functions (row kernels' fused producers).
  std::vector<std::string> helpers;
  std::string body;
  /// Elements one call of the body reads or writes, roughly (how the host
  /// decides whether a launch is worth spreading over threads).
  int64_t work = 1;

  /// Adds a pointer member for `pointer` (an expression of the step
  /// function); returns the member name.
  std::string pointer(StringRef type, bool isConst, StringRef pointerExpr) {
    std::string name = "p";
    name += str(members.size());
    std::string member = isConst ? "const " : "";
    member += type.str();
    member += " *";
    member += name;
    members.push_back(std::move(member));
    arguments.push_back(pointerExpr.str());
    return name;
  }
};

//===----------------------------------------------------------------------===//
// The emitter
//===----------------------------------------------------------------------===//

class ProgramEmitter {
public:
  ProgramEmitter(func::FuncOp step, const EmitOptions &options,
                 ProgramReport &report)
      : step(step), options(options), report(report) {}

  LogicalResult run(llvm::raw_ostream &os);

  /// Library mode (EmitLibrary.cpp): emits the function as namespace
  /// `space` holding its kernels and `extern "C" void symbol(ctx)`, whose
  /// ctx->buffers are its arguments followed by its results, and
  /// `extern "C" int64_t symbol_arena_bytes()`.
  LogicalResult runLibrary(llvm::raw_ostream &os, StringRef space,
                           StringRef symbol);

private:
  struct Buffer {
    std::string name;
    std::string source;
    /// A parameter's state: the parameter's name (`name` is
    /// "<parameter>.<role>").
    std::string stateOf;
    /// The .npy file of a parameter or state buffer (rt::npyFileNames).
    std::string file;
    std::string role;
    Type element;
    SmallVector<int64_t> shape;
    /// Constant data as a C++ initializer list (constants only).
    std::string constantData;
    bool trainable = false;
    /// State only: the value of every element before the first step.
    double initialValue = 0;
    /// True when the buffer holds this rank's ZeRO slice of a tensor of
    /// `fileShape` (`sharc.slice`, set by sharc-zero).
    bool sliced = false;
    /// The shape of the buffer's file: `shape`, or the whole tensor's.
    SmallVector<int64_t> fileShape;
    /// True when the buffer lives in a file on NVMe (`#sharc.storage<nvme>`,
    /// set by sharc-offload-optimizer), read and written whole through
    /// ctx->swap.
    bool offloaded = false;
    /// True when the buffer lives in (pinned) host memory
    /// (`#sharc.storage<host>`): only kernels run on the host touch it.
    bool inHost = false;
    /// State whose value before the first step is derived from another
    /// buffer, never saved: a carried 16-bit compute copy
    /// (`#sharc.state<"p", "compute_copy">`) is parameter p's master rounded;
    /// the parameter's name here, its index below.
    std::string derivedFromName;
    int derivedFrom = -1;
  };

  LogicalResult collectBuffers();
  /// Collects the buffers and emits every op of the planned function into
  /// the step body; returns the planned arena bytes.
  FailureOr<int64_t> emitFunction();
  /// The kernel structs, constant arrays and the run-time error messages.
  void writeKernelsAndTables(llvm::raw_ostream &os) const;
  /// Library mode: every argument is an input buffer, every result an
  /// output buffer (EmitLibrary.cpp).
  LogicalResult collectLibraryBuffers();
  /// Library mode: copies each returned value into its result buffer.
  LogicalResult emitLibraryReturn(func::ReturnOp ret);
  LogicalResult emitOp(Operation *op);
  LogicalResult emitReturn(func::ReturnOp ret);

  /// A pointer expression (in the step function) to the data of `value`.
  FailureOr<std::string> pointerTo(Value value);
  /// A pointer expression cast to the storage type of `value`.
  FailureOr<std::string> typedPointer(Value value);

  /// Adds a kernel (deduplicated by text) and a launch of it over `count`
  /// indices.
  void launch(const KernelText &kernel, int64_t count);
  /// Emits the pending run of launches (one grouped launch when several).
  void flushLaunches();
  /// The step body, for appending a statement after the pending launches.
  std::string &body() {
    flushLaunches();
    return stepBody;
  }
  int errorCode(std::string message);

  // Elementwise groups.
  LogicalResult emitElementwise(Operation *op);
  /// Appends to `code` the scalar computation of `fusion`'s body at index `i`
  /// (loads of its operands into `kernel`'s members), naming values
  /// `<prefix>N`; `scalars` maps body values to their names.
  LogicalResult emitFusionBody(Operation *fusion, KernelText &kernel,
                               std::string &code,
                               llvm::DenseMap<Value, std::string> &scalars,
                               llvm::StringRef prefix);
  /// Reads element INDEX of a row kernel's input: a load, or a call of a
  /// member function computing a producer fused into the kernel
  /// (`sharc.fuse_into`).
  using Loader = std::function<std::string(llvm::StringRef index)>;
  FailureOr<Loader> rowInput(KernelText &kernel, Value input);
  FailureOr<std::string> scalarExpr(Operation *op, ArrayRef<std::string> args);
  FailureOr<std::string> loadScalar(KernelText &kernel, Value value,
                                    ArrayRef<int64_t> iteration);

  // Other ops.
  /// A tensor as a GEMM reads or writes it: a pointer, and the shape and
  /// strides (in elements) of the matmul operand or result it stands for.
  struct StridedView {
    std::string pointer;
    SmallVector<int64_t> shape, strides;
  };
  /// The view of `value`: row-major, or a transpose read in place
  /// (`sharc.fuse_into`) or written by its GEMM (`sharc.gemm_output`).
  FailureOr<StridedView> stridedView(Value value);
  /// What a GEMM's epilogue adds to the product (sharc-fuse's
  /// sharc.gemm_epilogue): a bias vector added to every row, an activation
  /// ("relu" or "gelu_tanh") and where the pre-activation goes (`aux`).
  /// Value-initialized (`{}`): no bias, no activation (none is 0), no aux.
  struct GemmEpilogue {
    Value bias;
    GemmActivation activation;
    Value aux;
  };
  /// One GEMM for `op`, writing `result` (the matmul's own by default) with
  /// `epilogue`.
  LogicalResult emitMatmul(MatmulOp op, Value result = {},
                           const GemmEpilogue &epilogue = {});
  LogicalResult emitReduce(ReduceOp op);
  LogicalResult emitSoftmax(Operation *op, int64_t axis, bool log);
  LogicalResult emitLayerNorm(LayerNormOp op);
  LogicalResult emitLoss(Operation *op, Value input, Value target, Value weight,
                         LossReduction reduction,
                         std::optional<uint64_t> ignoreIndex, bool fromLogits);
  LogicalResult emitIndexMap(Operation *op, Value source,
                             const std::string &offsetCode);
  LogicalResult emitConcat(ConcatOp op);
  LogicalResult emitInsertSlice(InsertSliceOp op);
  LogicalResult emitGather(GatherOp op);
  LogicalResult emitScatterAdd(ScatterAddOp op);
  LogicalResult emitCopy(Value from, Value to);
  LogicalResult emitAllReduceStart(AllReduceStartOp op);
  LogicalResult emitWait(WaitOp op);
  /// A reduce-scatter (`sum`: whether it sums, else takes the maximum) or,
  /// without `sum`, an all-gather.
  LogicalResult emitSliceCollective(Operation *op, int64_t ranks,
                                    std::optional<bool> sum);
  LogicalResult emitShard(ShardOp op);
  /// Rank `root`'s operand on every rank: a copy into the result, then a
  /// broadcast of it in place (counted in the report as a broadcast).
  LogicalResult emitBroadcastFrom(BroadcastFromOp op);
  /// A started NVMe transfer of offloaded `argument`'s file (`op`, a
  /// swap_in_start or swap_out_start, whose future its wait names): a read
  /// into `memory` (the future's), or a write from `memory` (the new value).
  LogicalResult emitSwap(Operation *op, Value argument, Value memory,
                         bool read);
  /// A started copy between device and host memory (ZeRO-Offload to the
  /// CPU), whose future its wait names.
  LogicalResult emitTransfer(TransferStartOp op);
  /// Fails unless a collective (or shard) over `ranks` ranks matches the
  /// world size the program is compiled for.
  LogicalResult checkGroup(Operation *op, int64_t ranks);
  /// Records that a reduction needs `bytes` of the host communicator's
  /// staging (ProgramReport::stagingBytes keeps the largest).
  void planStaging(int64_t bytes);
  /// A C++ `for` over the micro-batches running the body's statements; the
  /// body's micro-batch arguments point into the inputs, its carried
  /// arguments at the loop's results.
  LogicalResult emitMicroBatchLoop(MicroBatchLoopOp loop);
  /// conv2d, its gradients, max/avg pooling and their gradients (EmitNN.cpp).
  LogicalResult emitWindowOp(Operation *op);

  func::FuncOp step;
  /// True in library mode (runLibrary).
  bool library = false;
  const EmitOptions &options;
  ProgramReport &report;

  std::vector<Buffer> buffers;
  DenseMap<Value, int> bufferOf;
  int lossBuffer = -1, lrBuffer = -1, stepBuffer = -1;
  /// Output buffers by output name.
  llvm::StringMap<int> outputBuffers;
  /// The buffer of output `name`, -1 if there is none.
  int outputBuffer(llvm::StringRef name) const {
    auto it = outputBuffers.find(name);
    return it == outputBuffers.end() ? -1 : it->second;
  }

  llvm::StringMap<std::string> kernelNames;
  std::string kernelDefinitions;
  std::string stepBody;
  /// Consecutive launches of one kernel that do not depend on each other
  /// (the optimizer update of every parameter): emitted together as one
  /// grouped launch by flushLaunches().
  struct PendingLaunches {
    std::string kernel;
    int64_t work = 0;
    std::vector<std::pair<std::string, int64_t>> launches; // arguments, count
    llvm::StringSet<> reads, writes;
  } pending;
  std::vector<std::string> messages;
  /// Pointer expressions of the block arguments of loop bodies.
  llvm::DenseMap<Value, std::string> argumentPointers;
  /// How many times per step the statements being emitted run (the product
  /// of the counts of the loops around them), for the report.
  int64_t repeat = 1;
  /// The ticket variable of each started collective, by its future.
  llvm::DenseMap<Value, std::string> tickets;
  /// The futures of started NVMe reads and writes (waited for through
  /// ctx->swap, not ctx->comm) and of copies between device and host memory
  /// (sharc::kern::transferWait).
  llvm::DenseSet<Value> swapFutures, transferFutures;
  /// True while the kernels of an op that runs on the host (`sharc.on_host`)
  /// are emitted: launch() emits them as host launches.
  bool hostLaunch = false;
  /// Compute calls (kernel launches and GEMM calls) emitted so far, and for
  /// each started collective, by its future, the count at its start and its
  /// report entry (ProgramReport::schedule, filled in at its wait).
  int64_t computeCalls = 0;
  llvm::DenseMap<Value, std::pair<int64_t, ScheduledCollective>> startedAt;

  /// Records a started collective of runtime kind `kind` moving `bytes` per
  /// rank, whose future is `future`, for the report's schedule.
  void recordStart(Value future, int kind, uint64_t bytes);
};

/// Code that decomposes `i` into coordinates c0, c1, ... of `resultShape` and
/// defines `offset` = base + sum of c_d * strides[d].
std::string affineOffset(ArrayRef<int64_t> resultShape,
                         ArrayRef<int64_t> strides, int64_t base);

} // namespace sharc::codegen

#endif // SHARC_CODEGEN_EMITTERINTERNAL_H
