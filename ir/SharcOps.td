//===- SharcOps.td - sharc operations ------------------------*- tablegen -*-===//
//
// Semantics of every op are executed by ir/Evaluator.cpp and documented in
// docs/ir.md.  Result shapes are inferred (InferTypeOpAdaptor) wherever they
// follow from operands and attributes, so the verifier and the builders share
// one shape function per op.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_OPS_TD
#define SHARC_OPS_TD

include "ir/SharcDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"

class Sharc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sharc_Dialect, mnemonic, traits>;

/// An op computed element by element with numpy broadcasting, which a
/// `sharc.fusion` body may hold: the verifier of fusions, sharc-fuse and the
/// code generator all ask this trait (sharc::isFusibleElementwiseOp).
def Sharc_Fusible : NativeOpTrait<"FusibleElementwise"> {
  let cppNamespace = "::sharc::OpTrait";
}

//===----------------------------------------------------------------------===//
// Constants and generators
//===----------------------------------------------------------------------===//

def Sharc_ConstantOp : Sharc_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "a constant tensor";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Sharc_IotaOp : Sharc_Op<"iota", [Pure]> {
  let summary = "indices along one dimension";
  let description = [{
    `result[i0, ..., in] = i_dimension`, converted to the result element type.
  }];
  let arguments = (ins Sharc_I64Attr:$dimension);
  let results = (outs Sharc_NumericTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Sharc_UnaryOp<string mnemonic, Type operandType, list<Trait> traits = []>
    : Sharc_Op<mnemonic, !listconcat(traits,
          [Pure, SameOperandsAndResultType, Elementwise, Sharc_Fusible])> {
  let arguments = (ins operandType:$operand);
  let results = (outs operandType:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
}

def Sharc_NegOp : Sharc_UnaryOp<"neg", Sharc_NumericTensor> {
  let summary = "-x";
}
def Sharc_AbsOp : Sharc_UnaryOp<"abs", Sharc_NumericTensor> {
  let summary = "|x|";
}
def Sharc_ReluOp : Sharc_UnaryOp<"relu", Sharc_NumericTensor> {
  let summary = "max(x, 0)";
}
def Sharc_ExpOp : Sharc_UnaryOp<"exp", Sharc_FloatTensor> {
  let summary = "e^x";
}
def Sharc_LogOp : Sharc_UnaryOp<"log", Sharc_FloatTensor> {
  let summary = "natural logarithm";
}
def Sharc_SqrtOp : Sharc_UnaryOp<"sqrt", Sharc_FloatTensor> {
  let summary = "square root";
}
def Sharc_RsqrtOp : Sharc_UnaryOp<"rsqrt", Sharc_FloatTensor> {
  let summary = "1 / sqrt(x)";
}
def Sharc_ErfOp : Sharc_UnaryOp<"erf", Sharc_FloatTensor> {
  let summary = "Gauss error function";
}
def Sharc_TanhOp : Sharc_UnaryOp<"tanh", Sharc_FloatTensor> {
  let summary = "hyperbolic tangent";
}
def Sharc_SigmoidOp : Sharc_UnaryOp<"sigmoid", Sharc_FloatTensor> {
  let summary = "1 / (1 + e^-x)";
}
def Sharc_SinOp : Sharc_UnaryOp<"sin", Sharc_FloatTensor> {
  let summary = "sine";
}
def Sharc_CosOp : Sharc_UnaryOp<"cos", Sharc_FloatTensor> {
  let summary = "cosine";
}
def Sharc_AsinOp : Sharc_UnaryOp<"asin", Sharc_FloatTensor> {
  let summary = "inverse sine (NaN outside [-1, 1])";
}
def Sharc_AcosOp : Sharc_UnaryOp<"acos", Sharc_FloatTensor> {
  let summary = "inverse cosine (NaN outside [-1, 1])";
}
def Sharc_AtanOp : Sharc_UnaryOp<"atan", Sharc_FloatTensor> {
  let summary = "inverse tangent";
}
def Sharc_AsinhOp : Sharc_UnaryOp<"asinh", Sharc_FloatTensor> {
  let summary = "inverse hyperbolic sine";
}
def Sharc_AcoshOp : Sharc_UnaryOp<"acosh", Sharc_FloatTensor> {
  let summary = "inverse hyperbolic cosine (NaN below 1)";
}
def Sharc_AtanhOp : Sharc_UnaryOp<"atanh", Sharc_FloatTensor> {
  let summary = "inverse hyperbolic tangent (NaN outside [-1, 1])";
}
def Sharc_FloorOp : Sharc_UnaryOp<"floor", Sharc_FloatTensor> {
  let summary = "largest integer not greater than x";
}
def Sharc_NotOp : Sharc_UnaryOp<"not", Sharc_BoolTensor> {
  let summary = "logical negation";
}

def Sharc_GeluOp : Sharc_Op<"gelu",
    [Pure, SameOperandsAndResultType, Elementwise, Sharc_Fusible]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `none`: x/2 (1 + erf(x/sqrt(2))); `tanh`: x/2 (1 + tanh(sqrt(2/pi) (x +
    0.044715 x^3))).
  }];
  let arguments = (ins Sharc_FloatTensor:$operand,
      DefaultValuedAttr<Sharc_GeluApproximationAttr,
                        "GeluApproximation::none">:$approximation);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
}

def Sharc_CastOp : Sharc_Op<"cast", [Pure, SameOperandsAndResultShape,
    Sharc_Fusible]> {
  let summary = "element type conversion";
  let description = [{
    Float to float rounds to nearest even; float to integer truncates toward
    zero; to i1 is `x != 0`; i1 to a number is 0 or 1.
  }];
  let arguments = (ins Sharc_Tensor:$operand);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `to` type($result)";
  let hasFolder = 1;
}

class Sharc_BinaryOp<string mnemonic, Type operandType, list<Trait> traits = []>
    : Sharc_Op<mnemonic, !listconcat(traits,
          [Pure, InferTypeOpAdaptor, Sharc_Fusible])> {
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs operandType:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Sharc_AddOp : Sharc_BinaryOp<"add", Sharc_NumericTensor, [Commutative]> {
  let summary = "lhs + rhs (broadcasting)";
  // The sum of disjoint slices inserted into zeros (the gradient of a value
  // split into slices) is one chain of insertions, or a concat when the
  // slices tile the tensor.
  let hasCanonicalizer = 1;
}
def Sharc_SubOp : Sharc_BinaryOp<"sub", Sharc_NumericTensor> {
  let summary = "lhs - rhs (broadcasting)";
}
def Sharc_MulOp : Sharc_BinaryOp<"mul", Sharc_NumericTensor, [Commutative]> {
  let summary = "lhs * rhs (broadcasting)";
}
def Sharc_DivOp : Sharc_BinaryOp<"div", Sharc_NumericTensor> {
  let summary = "lhs / rhs (broadcasting; integers truncate toward zero)";
}
def Sharc_PowOp : Sharc_BinaryOp<"pow", Sharc_NumericTensor> {
  let summary = "lhs ^ rhs (broadcasting)";
  // A float raised to a constant 2 is x * x, to a constant 1 is x (exactly:
  // x * x is exactly rounded like pow, and for f32 the square is exact in
  // the evaluator's double).
  let hasCanonicalizer = 1;
}
def Sharc_MaxOp : Sharc_BinaryOp<"max", Sharc_NumericTensor, [Commutative]> {
  let summary = "elementwise maximum (broadcasting; NaN propagates)";
}
def Sharc_MinOp : Sharc_BinaryOp<"min", Sharc_NumericTensor, [Commutative]> {
  let summary = "elementwise minimum (broadcasting; NaN propagates)";
}
def Sharc_AndOp : Sharc_BinaryOp<"and", Sharc_BoolTensor, [Commutative]> {
  let summary = "logical and (broadcasting)";
}
def Sharc_OrOp : Sharc_BinaryOp<"or", Sharc_BoolTensor, [Commutative]> {
  let summary = "logical or (broadcasting)";
}

def Sharc_CompareOp : Sharc_Op<"compare", [Pure, InferTypeOpAdaptor,
    Sharc_Fusible]> {
  let summary = "elementwise comparison (broadcasting) to i1";
  let arguments = (ins Sharc_Tensor:$lhs, Sharc_Tensor:$rhs,
                       Sharc_ComparePredicateAttr:$predicate);
  let results = (outs Sharc_BoolTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Sharc_SelectOp : Sharc_Op<"select", [Pure, InferTypeOpAdaptor,
    Sharc_Fusible]> {
  let summary = "cond ? on_true : on_false (broadcasting all three)";
  let arguments = (ins Sharc_BoolTensor:$condition, Sharc_Tensor:$on_true,
                       Sharc_Tensor:$on_false);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$condition `,` $on_true `,` $on_false attr-dict `:` "
                       "functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Sharc_FusionOp : Sharc_Op<"fusion", [IsolatedFromAbove, SingleBlock,
    RecursiveMemoryEffects, RecursivelySpeculatable]> {
  let summary = "a group of elementwise ops evaluated as one kernel";
  let description = [{
    The body is a function on whole tensors: its block arguments are the
    operands (same types), and `sharc.yield` gives the results.  Every result
    has the same shape, the iteration shape; every operand and every value of
    the body numpy-broadcasts to it.  The body holds only fusible elementwise
    ops (those with the Sharc_Fusible trait: `neg abs relu exp log sqrt rsqrt
    erf tanh sigmoid sin cos asin acos atan asinh acosh atanh floor not gelu
    cast add sub mul div pow max min
    and or compare select`) and splat `sharc.constant`s.  Evaluating the body op by op gives exactly the
    results of the unfused ops; sharc-fuse builds these ops for the code
    generator.
  }];
  let arguments = (ins Variadic<Sharc_Tensor>:$inputs);
  let results = (outs Variadic<Sharc_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "($inputs^)? attr-dict `:` functional-type($inputs, $results) $body";
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The shape every result has and every operand broadcasts to.
    llvm::ArrayRef<int64_t> getIterationShape() {
      return llvm::cast<mlir::RankedTensorType>(getResult(0).getType())
          .getShape();
    }
    /// The terminator of the body.
    YieldOp getYield();
  }];
}

def Sharc_YieldOp : Sharc_Op<"yield",
    [Pure, Terminator, ParentOneOf<["FusionOp", "MicroBatchLoopOp"]>]> {
  let summary = "the results of a sharc.fusion body or the carried values of "
                "a sharc.micro_batch_loop iteration";
  let arguments = (ins Variadic<Sharc_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

def Sharc_MicroBatchLoopOp : Sharc_Op<"micro_batch_loop", [SingleBlock,
    RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "runs its body once per micro-batch, carrying accumulators";
  let description = [{
    Gradient accumulation as a loop, so that the IR (and the code compiled
    from it) does not grow with the number of micro-batches.  Dimension 0 of
    every `inputs` operand is split into `count` equal micro-batches.  The body
    runs `count` times, for k = 0, 1, ..., count - 1 in order; its block
    arguments are micro-batch k of each input (rows [k m, (k + 1) m), m = rows
    / count) followed by the carried values, which are `inits` in iteration 0
    and the values the previous iteration yielded after it.  The results are
    the values the last iteration yielded.  The body may read values defined
    above the loop.

    ```mlir
    %loss, %grad = sharc.micro_batch_loop count 4
        inputs(%x : tensor<32x8xf32>)
        inits(%zero, %zeros : tensor<f32>, tensor<8xf32>)
        -> tensor<f32>, tensor<8xf32> {
    ^bb0(%micro: tensor<8x8xf32>, %loss_acc: tensor<f32>,
         %grad_acc: tensor<8xf32>):
      ...
      sharc.yield %new_loss, %new_grad : tensor<f32>, tensor<8xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Sharc_Tensor>:$inputs,
                       Variadic<Sharc_Tensor>:$inits,
                       ConfinedAttr<I64Attr, [IntPositive]>:$count);
  let results = (outs Variadic<Sharc_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `count` $count (`inputs` `(` $inputs^ `:` type($inputs) `)`)?
    `inits` `(` $inits `:` type($inits) `)` attr-dict `->` type($results) $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The terminator of the body.
    YieldOp getYield();
    /// The body's micro-batch arguments (one per input) and carried
    /// arguments (one per init).
    mlir::Block::BlockArgListType getMicroBatchArgs() {
      return getBody().front().getArguments().take_front(getInputs().size());
    }
    mlir::Block::BlockArgListType getCarriedArgs() {
      return getBody().front().getArguments().drop_front(getInputs().size());
    }
  }];
}

def Sharc_GradientsOp : Sharc_Op<"gradients", [Pure,
    AllTypesMatch<["values", "results"]>]> {
  let summary = "the complete local gradients of a training step";
  let description = [{
    Marks where the gradients of a step are complete on this rank: the
    micro-batch sums, before clipping and the update.  `params` names each
    operand's parameter (its `sharc.param` name).  On one rank it is the
    identity.  sharc-optimizer builds it, knowing nothing of ranks;
    sharc-data-parallel (and the ZeRO passes) replace it with the collectives
    that make the gradients global, so that the code generator never sees it.

    ```mlir
    %g:2 = sharc.gradients %gw, %gb {params = ["fc.weight", "fc.bias"]}
        : tensor<3x4xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Variadic<Sharc_Tensor>:$values, StrArrayAttr:$params);
  let results = (outs Variadic<Sharc_Tensor>:$results);
  let assemblyFormat = "$values attr-dict `:` type($values)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra, reductions, normalization
//===----------------------------------------------------------------------===//

def Sharc_MatmulOp : Sharc_Op<"matmul", [Pure, InferTypeOpAdaptor]> {
  let summary = "batched matrix product with numpy batch broadcasting";
  let description = [{
    Both operands have rank >= 2.  The last two dimensions are the matrix
    (transposed first when `transpose_lhs` / `transpose_rhs` is set); leading
    dimensions broadcast.  f16/bf16 products accumulate in f32.
  }];
  let arguments = (ins Sharc_NumericTensor:$lhs, Sharc_NumericTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Sharc_NumericTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  // matmul(transpose(x), y) takes x with transpose_lhs flipped (and the same
  // for the rhs): the GEMM reads the matrix transposed, no copy is made.
  let hasCanonicalizer = 1;
}

def Sharc_ReduceOp : Sharc_Op<"reduce", [Pure, InferTypeOpAdaptor]> {
  let summary = "sum, mean or max over a set of axes";
  let description = [{
    An empty `axes` list reduces nothing (the identity).  Floating-point sums
    accumulate in f64 and round once.
  }];
  let arguments = (ins Sharc_NumericTensor:$operand,
                       Sharc_ReduceKindAttr:$kind,
                       DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "false">:$keep_dims);
  let results = (outs Sharc_NumericTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Sharc_SoftmaxOp : Sharc_Op<"softmax",
    [Pure, SameOperandsAndResultType]> {
  let summary = "exp(x - max) / sum(exp(x - max)) along one axis";
  let arguments = (ins Sharc_FloatTensor:$operand, Sharc_I64Attr:$axis);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Sharc_LogSoftmaxOp : Sharc_Op<"log_softmax",
    [Pure, SameOperandsAndResultType]> {
  let summary = "x - max - log(sum(exp(x - max))) along one axis";
  let arguments = (ins Sharc_FloatTensor:$operand, Sharc_I64Attr:$axis);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Sharc_LayerNormOp : Sharc_Op<"layer_norm", [Pure, InferTypeOpAdaptor]> {
  let summary = "layer normalization over the trailing axes from `axis` on";
  let description = [{
    mean and inverse standard deviation over dimensions axis..rank-1 (computed
    in f64, kept in the operand type), y = (x - mean) * inv_std * scale + bias.
    `mean` and `inv_std` have the operand's shape with the normalized
    dimensions set to 1.
  }];
  let arguments = (ins Sharc_FloatTensor:$operand, Sharc_FloatTensor:$scale,
                       Optional<Sharc_FloatTensor>:$bias,
                       Sharc_I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Sharc_FloatTensor:$result, Sharc_FloatTensor:$mean,
                      Sharc_FloatTensor:$inv_std);
  let assemblyFormat = "$operand `,` $scale (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Sharc_ReshapeOp : Sharc_Op<"reshape", [Pure]> {
  let summary = "same elements in row-major order, new shape";
  let arguments = (ins Sharc_Tensor:$operand);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Sharc_TransposeOp : Sharc_Op<"transpose", [Pure, InferTypeOpAdaptor]> {
  let summary = "permute dimensions: result dim i is operand dim perm[i]";
  let arguments = (ins Sharc_Tensor:$operand, DenseI64ArrayAttr:$permutation);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  // Swapping the matrix dimensions of a matmul used once is the matmul of the
  // swapped operands: (A B)^T = B^T A^T.
  let hasCanonicalizer = 1;
}

def Sharc_BroadcastOp : Sharc_Op<"broadcast", [Pure]> {
  let summary = "numpy-broadcast the operand to the result shape";
  let arguments = (ins Sharc_Tensor:$operand);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `to` type($result)";
  let hasVerifier = 1;
}

def Sharc_SliceOp : Sharc_Op<"slice", [Pure]> {
  let summary = "strided slice: result[i] = operand[start + i * stride]";
  let description = [{
    Per dimension `d`, result index `i` reads operand index
    `start[d] + i * stride[d]`; strides are non-zero and may be negative.  The
    result shape comes from the result type and every read must be in bounds.
  }];
  let arguments = (ins Sharc_Tensor:$operand, DenseI64ArrayAttr:$start,
                       DenseI64ArrayAttr:$stride);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `to` type($result)";
  let hasVerifier = 1;
}

def Sharc_InsertSliceOp : Sharc_Op<"insert_slice",
    [Pure, AllTypesMatch<["dest", "result"]>]> {
  let summary = "strided update: dest with dest[start + i * stride] = source[i]";
  let description = [{
    The placement that `slice` reads: per dimension `d`, source index `i` is
    written to result index `start[d] + i * stride[d]`; every other element
    is `dest`'s.  Strides are non-zero and may be negative; every write must
    be in bounds.  Into zeros, it is the gradient of `slice`.
  }];
  let arguments = (ins Sharc_Tensor:$source, Sharc_Tensor:$dest,
                       DenseI64ArrayAttr:$start, DenseI64ArrayAttr:$stride);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$source `into` $dest attr-dict `:` type($source) "
                       "`into` type($dest)";
  let hasVerifier = 1;
}

def Sharc_ConcatOp : Sharc_Op<"concat", [Pure, InferTypeOpAdaptor]> {
  let summary = "join tensors along one axis";
  let arguments = (ins Variadic<Sharc_Tensor>:$inputs, Sharc_I64Attr:$axis);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
}

def Sharc_GatherOp : Sharc_Op<"gather", [Pure, InferTypeOpAdaptor]> {
  let summary = "take entries along an axis (ONNX Gather, embedding lookup)";
  let description = [{
    result shape = data[:axis] ++ indices.shape ++ data[axis+1:].  Negative
    indices count from the end; an index out of range is a run-time error.
  }];
  let arguments = (ins Sharc_Tensor:$data, Sharc_IndexTensor:$indices,
                       Sharc_I64Attr:$axis);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` "
                       "functional-type(operands, results)";
}

def Sharc_ScatterAddOp : Sharc_Op<"scatter_add",
    [Pure, AllTypesMatch<["dest", "result"]>]> {
  let summary = "add slices at entries along an axis (the transpose of gather)";
  let description = [{
    result = dest, then result[o..., indices[j...], i...] +=
    updates[o..., j..., i...] for every index, where `updates` has gather's
    result shape dest[:axis] ++ indices.shape ++ dest[axis+1:].  Repeated
    indices accumulate; negative indices count from the end; an index out of
    range is a run-time error.  Sums accumulate in f64 and round once.
  }];
  let arguments = (ins Sharc_FloatTensor:$dest, Sharc_IndexTensor:$indices,
                       Sharc_FloatTensor:$updates, Sharc_I64Attr:$axis);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$dest `,` $indices `,` $updates attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_TriluOp : Sharc_Op<"trilu", [Pure, SameOperandsAndResultType]> {
  let summary = "keep the upper or lower triangle of the last two dims";
  let description = [{
    Upper: keep entries with j - i >= diagonal; lower: j - i <= diagonal;
    everything else becomes zero.
  }];
  let arguments = (ins Sharc_Tensor:$operand, BoolAttr:$upper,
                       DefaultValuedAttr<Sharc_I64Attr, "0">:$diagonal);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Randomness
//===----------------------------------------------------------------------===//

def Sharc_DropoutMaskOp : Sharc_Op<"dropout_mask", [Pure]> {
  let summary = "a counter-based random keep mask (training-mode dropout)";
  let description = [{
    `result[e]` is true (keep) with probability about 1 - `ratio`.  The bits
    come from Philox-4x32-10 (runtime/Random.h) with key `seed` and counter
    (j / 4, row, step, stream), output j % 4, where the result's elements
    are split into `rows.size` equal blocks in row-major order (dimension 0
    of a batch-shaped tensor), e is element j of block b, and row = rows[b].
    An element is kept when its 32 random bits are at least
    floor(ratio * 2^32).  So a mask depends only on the seed, the step, the
    global batch row and the position in the row: not on the rank, the
    world size, the micro-batch split or the target.  A result whose element
    count is not a multiple of `rows.size` is one block keyed by row 0.
  }];
  let arguments = (ins Sharc_I64Tensor:$step, Sharc_I64Tensor:$rows,
                       F64Attr:$ratio, Sharc_I64Attr:$seed,
                       Sharc_I64Attr:$stream);
  let results = (outs Sharc_BoolTensor:$result);
  let assemblyFormat = "$step `,` $rows attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_SampleRowsOp : Sharc_Op<"sample_rows", [Pure]> {
  let summary = "the global batch rows of this rank's share of a step";
  let description = [{
    `result[i] = rank * n + i` for a result of n elements: rank r of a
    data-parallel group holds rows [r n, (r + 1) n) of the step's global
    batch (docs/runtime.md), and a single rank rows [0, n).
  }];
  let results = (outs Sharc_I64Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Sharc_NllLossOp : Sharc_Op<"nll_loss", [Pure, InferTypeOpAdaptor]> {
  let summary = "negative log-likelihood loss (ONNX NegativeLogLikelihoodLoss)";
  let description = [{
    input [N, C, d1...] holds log-probabilities, target [N, d1...] class
    indices.  loss[n, d] = -input[n, target[n,d], d] * weight[target[n,d]],
    zero where target == ignore_index.  `mean` divides the sum by the sum of
    the weights of the non-ignored targets.
  }];
  let arguments = (ins Sharc_FloatTensor:$input, Sharc_IndexTensor:$target,
                       Optional<Sharc_FloatTensor>:$weight,
                       Sharc_LossReductionAttr:$reduction,
                       OptionalAttr<Sharc_I64Attr>:$ignore_index);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $target (`,` $weight^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Sharc_CrossEntropyOp : Sharc_Op<"cross_entropy",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "softmax cross-entropy loss on logits";
  let description = [{
    nll_loss(log_softmax(logits, axis = 1), target, weight), fused so that
    code generation can emit it as one row kernel.
  }];
  let arguments = (ins Sharc_FloatTensor:$logits, Sharc_IndexTensor:$target,
                       Optional<Sharc_FloatTensor>:$weight,
                       Sharc_LossReductionAttr:$reduction,
                       OptionalAttr<Sharc_I64Attr>:$ignore_index);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $target (`,` $weight^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (NCHW)
//===----------------------------------------------------------------------===//

def Sharc_Conv2DOp : Sharc_Op<"conv2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D convolution, NCHW input, OIHW weight, optional bias";
  let description = [{
    `padding` is [top, left, bottom, right]; `groups` splits channels as in
    ONNX Conv.
  }];
  let arguments = (ins Sharc_FloatTensor:$input, Sharc_FloatTensor:$weight,
                       Optional<Sharc_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<Sharc_I64Attr, "1">:$groups);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Sharc_Conv2DInputGradOp : Sharc_Op<"conv2d_input_grad", [Pure]> {
  let summary = "gradient of conv2d with respect to its input";
  let description = [{
    The transposed convolution: for a conv2d with these attributes whose
    input has the result type [N, C, H, W], weight [O, C/groups, KH, KW] and
    output gradient [N, O, OH, OW], result[n, c, h, w] is the sum of
    output_grad[n, o, oh, ow] * weight[o, c mod C/groups, i, j] over the
    output channels o of c's group and the taps with
    h = oh * strides[0] - padding[0] + i * dilations[0] and
    w = ow * strides[1] - padding[1] + j * dilations[1].  The result shape
    comes from the result type; the verifier checks that conv2d maps it to
    `output_grad`'s shape.
  }];
  let arguments = (ins Sharc_FloatTensor:$output_grad,
                       Sharc_FloatTensor:$weight,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<Sharc_I64Attr, "1">:$groups);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$output_grad `,` $weight attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_Conv2DWeightGradOp : Sharc_Op<"conv2d_weight_grad", [Pure]> {
  let summary = "gradient of conv2d with respect to its weight";
  let description = [{
    For a conv2d with these attributes, input [N, C, H, W], a weight of the
    result type [O, C/groups, KH, KW] and output gradient [N, O, OH, OW]:
    result[o, c, i, j] is the sum over n, oh, ow of
    output_grad[n, o, oh, ow] * input[n, g * C/groups + c, h, w] (zero in the
    padding), with g the group of o and h, w as in `conv2d_input_grad`.
  }];
  let arguments = (ins Sharc_FloatTensor:$input,
                       Sharc_FloatTensor:$output_grad,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<Sharc_I64Attr, "1">:$groups);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $output_grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_MaxPool2DOp : Sharc_Op<"max_pool2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D max pooling over NCHW; padding never wins";
  let arguments = (ins Sharc_FloatTensor:$input, DenseI64ArrayAttr:$kernel,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Sharc_MaxPool2DGradOp : Sharc_Op<"max_pool2d_grad",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "gradient of max_pool2d: each window's gradient to its maximum";
  let description = [{
    Zeros of the input's type, then for every output cell of a max_pool2d of
    `input` with these attributes, output_grad at that cell is added at the
    window's maximum: its first position in row-major window order (first
    NaN if any), PyTorch's convention for ties.
  }];
  let arguments = (ins Sharc_FloatTensor:$input,
                       Sharc_FloatTensor:$output_grad,
                       DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $output_grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_AvgPool2DOp : Sharc_Op<"avg_pool2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D average pooling over NCHW";
  let description = [{
    With `count_include_pad` the divisor counts the explicit padding (but not
    the extra cells of ceil_mode windows); otherwise only real input cells.
  }];
  let arguments = (ins Sharc_FloatTensor:$input, DenseI64ArrayAttr:$kernel,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Sharc_AvgPool2DGradOp : Sharc_Op<"avg_pool2d_grad", [Pure]> {
  let summary = "gradient of avg_pool2d: each window's gradient spread evenly";
  let description = [{
    For an avg_pool2d with these attributes whose input has the result type:
    zeros, then every output cell's gradient divided by that window's divisor
    (as in avg_pool2d) is added to each real input cell of the window.
  }];
  let arguments = (ins Sharc_FloatTensor:$output_grad,
                       DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Sharc_FloatTensor:$result);
  let assemblyFormat = "$output_grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives over the data-parallel group
//===----------------------------------------------------------------------===//

def Sharc_AllReduceOp : Sharc_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "every rank receives the sum / max over all ranks";
  let arguments = (ins Sharc_NumericTensor:$operand,
                       Sharc_CollectiveKindAttr:$kind, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_NumericTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Sharc_AllReduceStartOp : Sharc_Op<"all_reduce_start", [
    TypesMatchWith<"the future holds a tensor of the operand's type",
                   "operand", "future",
                   "::sharc::FutureType::get(::llvm::cast<::mlir::RankedTensorType>($_self))">]> {
  let summary = "starts an all_reduce; `sharc.wait` gives its result";
  let description = [{
    The asynchronous form of `sharc.all_reduce`: the same sum or maximum over
    the ranks, delivered by the one `sharc.wait` of the returned future (in
    the same block).  Work between the two overlaps the communication.
  }];
  let arguments = (ins Sharc_NumericTensor:$operand,
                       Sharc_CollectiveKindAttr:$kind, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$operand attr-dict `:` type($operand)";
  let hasVerifier = 1;
}

def Sharc_WaitOp : Sharc_Op<"wait", [
    TypesMatchWith<"the result is the future's tensor", "future", "result",
                   "::llvm::cast<::sharc::FutureType>($_self).getValueType()">]> {
  let summary = "waits for a collective in flight and gives its result";
  let arguments = (ins Sharc_FutureType:$future);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$future attr-dict `:` qualified(type($future))";
}

def Sharc_ReduceScatterOp : Sharc_Op<"reduce_scatter", [InferTypeOpAdaptor]> {
  let summary = "sum over ranks; rank r keeps slice r of dimension 0";
  let arguments = (ins Sharc_NumericTensor:$operand,
                       Sharc_CollectiveKindAttr:$kind, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_NumericTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Sharc_ReduceScatterStartOp : Sharc_Op<"reduce_scatter_start",
                                          [InferTypeOpAdaptor]> {
  let summary = "starts a reduce_scatter; `sharc.wait` gives its result";
  let description = [{
    The asynchronous form of `sharc.reduce_scatter`: the same sum (or
    maximum) over the ranks of slice r of dimension 0, delivered to rank r by
    the one `sharc.wait` of the returned future (in the same block).  The
    operand is read until the wait, so it stays live until then; work between
    the two overlaps the communication (ZeRO stage 2: backward computes the
    next gradients while a bucket is reduced).

    ```mlir
    %f = sharc.reduce_scatter_start %bucket {kind = #sharc.collective_kind<sum>, ranks = 2 : i64}
        : (tensor<2x8xf32>) -> !sharc.future<tensor<1x8xf32>>
    %mine = sharc.wait %f : !sharc.future<tensor<1x8xf32>>
    ```
  }];
  let arguments = (ins Sharc_NumericTensor:$operand,
                       Sharc_CollectiveKindAttr:$kind, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sharc_AllGatherOp : Sharc_Op<"all_gather", [InferTypeOpAdaptor]> {
  let summary = "concatenate every rank's operand along dimension 0, in rank order";
  let arguments = (ins Sharc_Tensor:$operand, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Sharc_AllGatherStartOp : Sharc_Op<"all_gather_start",
                                      [InferTypeOpAdaptor]> {
  let summary = "starts an all_gather; `sharc.wait` gives its result";
  let description = [{
    The asynchronous form of `sharc.all_gather`: every rank's operand
    concatenated along dimension 0 in rank order, delivered by the one
    `sharc.wait` of the returned future (in the same block).  The operand is
    read and the result written until the wait, so both stay live until
    then; work between the two overlaps the communication (ZeRO stage 3: the
    next parameter is gathered while the current one's layer computes).

    ```mlir
    %f = sharc.all_gather_start %mine {ranks = 2 : i64}
        : (tensor<1x8xbf16>) -> !sharc.future<tensor<2x8xbf16>>
    %all = sharc.wait %f : !sharc.future<tensor<2x8xbf16>>
    ```
  }];
  let arguments = (ins Sharc_Tensor:$operand, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Offloaded state (ZeRO-Offload to NVMe)
//===----------------------------------------------------------------------===//

def Sharc_SwapInStartOp : Sharc_Op<"swap_in_start", [
    TypesMatchWith<"the future holds a tensor of the operand's type",
                   "operand", "future",
                   "::sharc::FutureType::get(::llvm::cast<::mlir::RankedTensorType>($_self))">]> {
  let summary = "starts reading an offloaded argument; `sharc.wait` gives it";
  let description = [{
    The operand is an argument of the enclosing function marked
    `sharc.storage = #sharc.storage<nvme>`: its value, read from this rank's
    file into device memory, is delivered by the one `sharc.wait` of the
    returned future (in the same block).  Work between the two overlaps the
    read (sharc-offload-optimizer reads the next sub-group of optimizer
    state while the current one is updated).  Evaluated, it is the operand.

    ```mlir
    %f = sharc.swap_in_start %exp_avg : tensor<1024xf32>
    %m = sharc.wait %f : !sharc.future<tensor<1024xf32>>
    ```
  }];
  let arguments = (ins Sharc_Tensor:$operand);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$operand attr-dict `:` type($operand)";
  let hasVerifier = 1;
}

def Sharc_SwapOutStartOp : Sharc_Op<"swap_out_start", [
    AllTypesMatch<["value", "target"]>,
    TypesMatchWith<"the future holds a tensor of the value's type",
                   "value", "future",
                   "::sharc::FutureType::get(::llvm::cast<::mlir::RankedTensorType>($_self))">]> {
  let summary = "starts writing the new value of an offloaded argument";
  let description = [{
    `target` is an argument of the enclosing function marked
    `sharc.storage = #sharc.storage<nvme>`; `value` is its new value, written
    to the target's file.  The value is read until the one `sharc.wait` of
    the returned future (in the same block), whose result is the value as
    stored: the function returns it as the target's new value, and nothing
    else may read it (it is in the file, not in device memory).  Evaluated,
    it is `value`.

    ```mlir
    %w = sharc.swap_out_start %new to %exp_avg : tensor<1024xf32>
    %stored = sharc.wait %w : !sharc.future<tensor<1024xf32>>
    return ..., %stored, ...
    ```
  }];
  let arguments = (ins Sharc_Tensor:$value, Sharc_Tensor:$target);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$value `to` $target attr-dict `:` type($value)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Host memory (ZeRO-Offload to the CPU)
//===----------------------------------------------------------------------===//

def Sharc_TransferStartOp : Sharc_Op<"transfer_start", [
    TypesMatchWith<"the future holds a tensor of the operand's type",
                   "operand", "future",
                   "::sharc::FutureType::get(::llvm::cast<::mlir::RankedTensorType>($_self))">]> {
  let summary = "starts copying a tensor between device and host memory";
  let description = [{
    Copies `operand` to the memory `to` names (`host`: pinned host memory,
    from device memory; `device`: device memory, from host memory); the one
    `sharc.wait` of the returned future (in the same block) gives the copy.
    A value in host memory is read only by ops that run on the host (marked
    `sharc.on_host`), by a transfer back, or returned as the new value of
    state kept in host memory (`#sharc.storage<host>`); the verifier checks
    it.  The operand is read until the wait.  Evaluated, it is the operand.

    ```mlir
    %f = sharc.transfer_start %grad to <host> : tensor<1024xf32>
    %g = sharc.wait %f : !sharc.future<tensor<1024xf32>>
    ```
  }];
  let arguments = (ins Sharc_Tensor:$operand, Sharc_StorageAttr:$to);
  let results = (outs Sharc_FutureType:$future);
  let assemblyFormat = "$operand `to` $to attr-dict `:` type($operand)";
  let hasVerifier = 1;
}

def Sharc_ShardOp : Sharc_Op<"shard", [Pure, InferTypeOpAdaptor]> {
  let summary = "this rank's slice of dimension 0, without communication";
  let description = [{
    Rank r of a group of `ranks` keeps slice r of dimension 0 of its own
    operand (dimension 0 divided by `ranks`): the layout of
    `sharc.reduce_scatter`'s result, with no sum.  ZeRO takes each rank's
    slice of a parameter this way (docs/zero.md).
  }];
  let arguments = (ins Sharc_Tensor:$operand, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Sharc_BroadcastFromOp : Sharc_Op<"broadcast_from",
    [SameOperandsAndResultType]> {
  let summary = "every rank receives rank `root`'s operand";
  let arguments = (ins Sharc_Tensor:$operand, Sharc_I64Attr:$root, Sharc_I64Attr:$ranks);
  let results = (outs Sharc_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // SHARC_OPS_TD
