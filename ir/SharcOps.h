//===- SharcOps.h - sharc dialect ---------------------------------*- C++
//-*-===//
//
// The sharc dialect, its attributes and operations, and the shape helpers that
// the verifiers, the importer and the evaluator share.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_IR_SHARCOPS_H
#define SHARC_IR_SHARCOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/SharcDialect.h.inc"
#include "ir/SharcEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/SharcAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/SharcTypes.h.inc"

namespace sharc::OpTrait {
/// Ops computed element by element that a sharc.fusion body may hold
/// (Sharc_Fusible in SharcOps.td; ask isFusibleElementwiseOp).
template <typename ConcreteType>
class FusibleElementwise
    : public mlir::OpTrait::TraitBase<ConcreteType, FusibleElementwise> {};
} // namespace sharc::OpTrait

#define GET_OP_CLASSES
#include "ir/SharcOps.h.inc"

namespace sharc {

/// The tensor a value of `type` occupies in memory: a ranked tensor type
/// itself, or the tensor a `!sharc.future` will hold; null for other types.
mlir::RankedTensorType storedTensorType(mlir::Type type);

/// Numpy broadcasting of two static shapes; failure when incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs);

/// True when `from` numpy-broadcasts to exactly `to`.
bool isBroadcastableTo(llvm::ArrayRef<int64_t> from,
                       llvm::ArrayRef<int64_t> to);

/// Output length of one pooled/convolved spatial dimension.
int64_t windowOutputSize(int64_t input, int64_t kernel, int64_t stride,
                         int64_t padBegin, int64_t padEnd, int64_t dilation,
                         bool ceilMode);

/// Geometry of a 2-D window op (conv2d, max/avg pooling and their
/// gradients) on NCHW tensors: `input` [N, C, H, W], `output` [N, O, OH, OW],
/// `kernel` taps [KH, KW], strides, padding [top, left, bottom, right] and
/// dilations (1 when empty).  The evaluator and the code generator read the
/// same geometry from it.
struct WindowGeometry {
  WindowGeometry(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> output,
                 llvm::ArrayRef<int64_t> kernel,
                 llvm::ArrayRef<int64_t> strides,
                 llvm::ArrayRef<int64_t> padding,
                 llvm::ArrayRef<int64_t> dilations = {});

  int64_t batch, channels, outChannels;
  int64_t height, width, outHeight, outWidth;
  int64_t kernelH, kernelW;
  int64_t strideH, strideW;
  int64_t padTop, padLeft, padBottom, padRight;
  int64_t dilationH = 1, dilationW = 1;
};

/// The most elements (2^40) and dimensions a sharc tensor type may have:
/// byte sizes of every tensor, and products of element counts with small
/// factors, then fit in int64_t.  A shape beyond them is refused wherever
/// shapes enter sharc (the ONNX importer, .mlir files, --input-shape).
/// Whether a tensor fits in memory is checked where it is allocated.
constexpr int64_t kMaxElements = int64_t(1) << 40;
constexpr int64_t kMaxRank = 64;

/// The number of elements of `shape`, or std::nullopt when a dimension is
/// negative (dynamic), the rank exceeds kMaxRank, or the product of its
/// nonzero dimensions exceeds kMaxElements (so that no product of its
/// dimensions overflows, even of an empty shape).
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);

/// The value of a float tensor that is one constant everywhere: a splat
/// constant, its broadcast, or the sum, difference or product of two such
/// (computed as the evaluator does: in double, rounded to the element type;
/// the autodiff of x^2 builds its exponent 2 - 1 that way).
std::optional<double> splatValue(mlir::Value value, int depth = 0);

/// Checks that every tensor type in `op` and the regions inside it (operands,
/// results, block arguments) has a static shape within kMaxElements;
/// otherwise emits an error at the offending op and fails.
mlir::LogicalResult verifyStaticShapes(mlir::Operation *op);

/// Number of elements of a static shape within kMaxElements (shapes are
/// checked where they enter sharc; a larger product gives INT64_MAX rather
/// than overflowing).
int64_t numElements(llvm::ArrayRef<int64_t> shape);

/// Row-major strides (in elements) of a static shape: the memory layout of
/// every tensor the evaluator and the generated code store.
llvm::SmallVector<int64_t> rowMajorStrides(llvm::ArrayRef<int64_t> shape);

/// True for the elementwise ops that a `sharc.fusion` body may contain (and
/// sharc-fuse groups): the unary ops, `gelu`, `cast`, the broadcasting binary
/// ops, `compare` and `select`.  Constants are not included; see
/// isSplatConstant.
bool isFusibleElementwiseOp(mlir::Operation *op);

/// True when `op` is a `sharc.constant` whose value is a splat.
bool isSplatConstant(mlir::Operation *op);

/// True for the ops without operands that a `sharc.fusion` body may hold and
/// sharc-fuse clones into every fusion that reads them, each computing its
/// elements where it needs them: splat constants and `sharc.iota`.
bool isFusionLeaf(mlir::Operation *op);

/// Returns the `sharc.param` attribute of function argument `index`, or null.
ParamAttr getParamAttr(mlir::Operation *func, unsigned index);

/// True when function argument `index` is a buffer (`sharc.buffer`): a
/// parameter the optimizer does not train, which the forward pass may update.
bool isBuffer(mlir::Operation *func, unsigned index);

/// The role ("step" or "rows") of function argument `index` when it is a
/// key of the random ops (`sharc.random_key`); empty otherwise.
llvm::StringRef getRandomKeyRole(mlir::Operation *func, unsigned index);

/// Returns the `sharc.slice` attribute of function argument `index` (the
/// argument is this rank's ZeRO slice of a whole tensor), or null.
SliceAttr getSliceAttr(mlir::Operation *func, unsigned index);

/// ZeRO: the function argument, marked `sharc.slice`, whose slice a gather
/// (a `sharc.all_gather` or `sharc.all_gather_start`) reads through the
/// casts and reshapes that pack it; null when it reads no such argument.
mlir::BlockArgument getGatheredSliceArgument(mlir::Operation *gather);

/// ZeRO: the last op of `block` that reads `gathered` (a gathered parameter,
/// the result of an all-gather or of the wait of a started one), a view of it
/// (a reshape or slice), or, through an op computed inside its users' kernels
/// (`sharc.fuse_into`), those users; the op of `block` that defines
/// `gathered` (an op result) when nothing reads it.  The gathered parameter's
/// memory is live until this op.
mlir::Operation *getLastGatheredReader(mlir::Value gathered,
                                       mlir::Block &block);

/// The argument of `func` whose next value result `result` is: the argument
/// with an equal `sharc.param` or `sharc.state` attribute (a parameter or a
/// piece of training state, updated by the step), or nullopt.
std::optional<unsigned> getUpdatedArgument(mlir::Operation *func,
                                           unsigned result);

/// ZeRO-Offload to the CPU: true when `value` is in host memory: an argument
/// kept there (`#sharc.storage<host>`), a result of an op that runs on the
/// host (`sharc.on_host`), the wait of a `sharc.transfer_start` to the host,
/// or a reshape (a view) of one of these.
bool isHostValue(mlir::Value value);

/// Checks that every reader of `value`, a value in host memory, may read it:
/// an op that runs on the host, a reshape (whose readers are checked in
/// turn), a transfer to the device, or the return of the new value of state
/// kept in host memory.  Reports the first other reader as an error.
mlir::LogicalResult verifyHostValueUses(mlir::Value value);

} // namespace sharc

#endif // SHARC_IR_SHARCOPS_H
