//===- SharcDialect.td - the sharc dialect -------------------*- tablegen -*-===//
//
// The sharc dialect: tensor-level operations of a training step, the
// collectives that sharding inserts, and the attributes that mark trainable
// parameters.  Every op's executable meaning lives in ir/Evaluator.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_DIALECT_TD
#define SHARC_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinTypes.td"

def Sharc_Dialect : Dialect {
  let name = "sharc";
  let cppNamespace = "::sharc";
  let summary = "Tensor-level operations of a training step";
  let description = [{
    Operations on statically shaped, ranked builtin tensors with element types
    f64, f32, f16, bf16, i64, i32 and i1.  Elementwise operations follow numpy
    broadcasting.  Function arguments that are trainable parameters carry a
    `sharc.param` attribute naming the parameter and its ONNX initializer;
    other arguments may carry `sharc.input = "name"` and results
    `sharc.output = "name"` with the model's names for them.  Training steps
    mark their carried state with `sharc.state`, updated parameters with
    `sharc.param`, and gradients with `sharc.grad = "param name"`.
    Collectives that overlap other work are started by one op and waited for
    by `sharc.wait`; the value in flight between them has type
    `!sharc.future<tensor<...>>`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Function-argument attribute that marks a trainable parameter.
    static constexpr llvm::StringLiteral getParamAttrName() {
      return llvm::StringLiteral("sharc.param");
    }
    /// Function-argument attribute holding a model input's name.
    static constexpr llvm::StringLiteral getInputAttrName() {
      return llvm::StringLiteral("sharc.input");
    }
    /// Function-result attribute holding a model output's name.
    static constexpr llvm::StringLiteral getOutputAttrName() {
      return llvm::StringLiteral("sharc.output");
    }
    /// Argument/result attribute marking training state (#sharc.state).
    static constexpr llvm::StringLiteral getStateAttrName() {
      return llvm::StringLiteral("sharc.state");
    }
    /// Argument attribute: the argument is this rank's ZeRO slice of a
    /// tensor (#sharc.slice).
    static constexpr llvm::StringLiteral getSliceAttrName() {
      return llvm::StringLiteral("sharc.slice");
    }
    /// Function-result attribute: the result is the gradient of the loss with
    /// respect to the named parameter.
    static constexpr llvm::StringLiteral getGradAttrName() {
      return llvm::StringLiteral("sharc.grad");
    }
    /// Function-argument attribute of the values random ops are keyed by
    /// (docs/ir.md): "step", the step counter (tensor<i64>), or "rows", the
    /// global batch rows of the micro-batch (tensor<Bxi64>).  Neither a
    /// parameter nor a data input: sharc-optimizer passes them.
    static constexpr llvm::StringLiteral getRandomKeyAttrName() {
      return llvm::StringLiteral("sharc.random_key");
    }
    /// Unit argument attribute on a `sharc.param` argument: a buffer (a
    /// BatchNormalization's running statistics), which the optimizer does
    /// not train.  A result of the function with the same `sharc.param` is
    /// its new value (the forward pass updates it).
    static constexpr llvm::StringLiteral getBufferAttrName() {
      return llvm::StringLiteral("sharc.buffer");
    }
    /// Argument attribute: where a training-state argument lives between
    /// steps (#sharc.storage; device memory when absent).
    static constexpr llvm::StringLiteral getStorageAttrName() {
      return llvm::StringLiteral("sharc.storage");
    }
  }];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Sharc_FloatElement : AnyTypeOf<[F64, F32, F16, BF16]>;
def Sharc_Element : AnyTypeOf<[F64, F32, F16, BF16, I64, I32, I1]>;

def Sharc_Tensor : StaticShapeTensorOf<[F64, F32, F16, BF16, I64, I32, I1]>;
def Sharc_FloatTensor : StaticShapeTensorOf<[F64, F32, F16, BF16]>;
def Sharc_NumericTensor : StaticShapeTensorOf<[F64, F32, F16, BF16, I64, I32]>;
def Sharc_IndexTensor : StaticShapeTensorOf<[I64, I32]>;
def Sharc_BoolTensor : StaticShapeTensorOf<[I1]>;
def Sharc_I64Tensor : StaticShapeTensorOf<[I64]>;

/// A signed 64-bit integer attribute (I64Attr's accessors are unsigned).
def Sharc_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
    "64-bit signless integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Sharc_ReduceKind : I32EnumAttr<"ReduceKind", "reduction kind", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>,
    I32EnumAttrCase<"max", 2>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_ReduceKindAttr
    : EnumAttr<Sharc_Dialect, Sharc_ReduceKind, "reduce_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "elementwise comparison", [
    I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>,
    I32EnumAttrCase<"lt", 2>, I32EnumAttrCase<"le", 3>,
    I32EnumAttrCase<"gt", 4>, I32EnumAttrCase<"ge", 5>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_ComparePredicateAttr
    : EnumAttr<Sharc_Dialect, Sharc_ComparePredicate, "predicate"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "GELU formula", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"tanh", 1>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_GeluApproximationAttr
    : EnumAttr<Sharc_Dialect, Sharc_GeluApproximation, "gelu_approximation"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_LossReduction : I32EnumAttr<"LossReduction",
    "how per-example losses are combined", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"sum", 1>,
    I32EnumAttrCase<"mean", 2>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_LossReductionAttr
    : EnumAttr<Sharc_Dialect, Sharc_LossReduction, "loss_reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_CollectiveKind : I32EnumAttr<"CollectiveKind",
    "combining function of a reducing collective", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"max", 1>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_CollectiveKindAttr
    : EnumAttr<Sharc_Dialect, Sharc_CollectiveKind, "collective_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_Storage : I32EnumAttr<"Storage",
    "where a training-state argument lives between steps", [
    I32EnumAttrCase<"device", 0>, I32EnumAttrCase<"nvme", 1>,
    I32EnumAttrCase<"host", 2>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}
def Sharc_StorageAttr : EnumAttr<Sharc_Dialect, Sharc_Storage, "storage"> {
  let summary = "where a training-state argument lives between steps";
  let description = [{
    `sharc.storage = #sharc.storage<nvme>` on an argument of the training
    step marked `sharc.state` (set by sharc-offload-optimizer): between steps
    the state lives in a file of this rank's on NVMe, not in device memory.
    The step reads it only through `sharc.swap_in_start` and writes its new
    value only through `sharc.swap_out_start`; the verifier checks both.
    `host`: the state lives in (pinned) host memory, and only ops that run
    on the host (marked `sharc.on_host`) read it; `sharc.transfer_start`
    copies values between the two memories.  `device` (the default when the
    attribute is absent) is device memory.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Sharc_GemmActivation : I32EnumAttr<"GemmActivation",
    "activation a GEMM's epilogue applies", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"relu", 1>,
    I32EnumAttrCase<"gelu_tanh", 2>]> {
  let cppNamespace = "::sharc";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Sharc_ParamAttr : AttrDef<Sharc_Dialect, "Param"> {
  let mnemonic = "param";
  let summary = "marks a function argument as a trainable parameter";
  let description = [{
    `#sharc.param<"name", "source">`: `name` is the parameter's sanitized
    identifier (safe for generated code and file names), `source` the name of
    the ONNX initializer it was imported from.
  }];
  let parameters = (ins StringRefParameter<"sanitized name">:$name,
                        StringRefParameter<"ONNX initializer name">:$source);
  let assemblyFormat = "`<` $name `,` $source `>`";
}

def Sharc_SliceAttr : AttrDef<Sharc_Dialect, "Slice"> {
  let mnemonic = "slice";
  let summary = "marks an argument as this rank's ZeRO slice of a tensor";
  let description = [{
    `sharc.slice = #sharc.slice<tensor<64x10xf32>, ranks = 2>` on an
    argument of the training step (a parameter at ZeRO stage 3, optimizer
    state from stage 1 on, set by sharc-zero): the argument holds this rank's
    slice of a tensor of type `whole` partitioned over `ranks` ranks.  The
    whole tensor, flattened and zero-padded to `ranks` * s elements with
    s = ceil(n / `ranks`), is cut into `ranks` rows of s elements; rank r
    holds row r, so the argument is a `tensor<s x E>` of the whole's element
    type E.  Files (weights, saved state) hold the whole tensor.
  }];
  let parameters = (ins "::mlir::RankedTensorType":$whole, "int64_t":$ranks);
  let extraClassDeclaration = [{
    /// Elements per rank: ceil(n / ranks).
    int64_t getSliceElements() const {
      return (getWhole().getNumElements() + getRanks() - 1) / getRanks();
    }
    /// The type of the argument: tensor<s x E>.
    ::mlir::RankedTensorType getSliceType() const {
      return ::mlir::RankedTensorType::get({getSliceElements()},
                                           getWhole().getElementType());
    }
  }];
  let assemblyFormat = "`<` $whole `,` `ranks` `=` $ranks `>`";
}

def Sharc_GemmEpilogueAttr : AttrDef<Sharc_Dialect, "GemmEpilogue"> {
  let mnemonic = "gemm_epilogue";
  let summary = "an elementwise op computed by the epilogue of a GEMM";
  let description = [{
    `sharc.gemm_epilogue = #sharc.gemm_epilogue<product = 1, bias = 0,
    result = 0, aux = -1, activation = relu>` on a `sharc.fusion` (or a plain
    elementwise op) that computes `act(matmul + bias)`, `matmul + bias` or
    `act(matmul)`: sharc-fuse's hand-off to the code generator, which runs
    the matmul (marked `sharc.fuse_into`) as one GEMM there whose epilogue
    adds the bias and applies the activation.  `product` is the operand that
    is the matmul's result, `bias` the operand added over the last dimension
    (-1: none), `result` the result the GEMM writes, `aux` the result that
    receives the pre-activation `matmul + bias` (-1: none; only with an
    activation), `activation` none, relu or gelu_tanh.  The dialect checks
    that they name distinct operands and results of the op.
  }];
  let parameters = (ins "int64_t":$product,
                        DefaultValuedParameter<"int64_t", "-1">:$bias,
                        "int64_t":$result,
                        DefaultValuedParameter<"int64_t", "-1">:$aux,
                        DefaultValuedParameter<"::sharc::GemmActivation",
                            "::sharc::GemmActivation::none">:$activation);
  let assemblyFormat = "`<` struct(params) `>`";
}

/// An f64 attribute parameter, 0 by default, printed as a float literal.
def Sharc_F64Parameter : AttrOrTypeParameter<"::llvm::APFloat", "an f64"> {
  let comparator = "$_lhs.bitwiseIsEqual($_rhs)";
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
      double value;
      if ($_parser.parseFloat(value))
        return ::mlir::failure();
      return ::llvm::APFloat(value);
    }() }];
  let printer = [{ $_printer.printFloat($_self) }];
  let defaultValue = "::llvm::APFloat(0.0)";
}

def Sharc_StateAttr : AttrDef<Sharc_Dialect, "State"> {
  let mnemonic = "state";
  let summary = "names a piece of training state";
  let description = [{
    `#sharc.state<"param", "role">` marks a training-step argument or result
    as state that the runtime carries from one step to the next and that
    checkpoints store: `role` is the kind of state (`exp_avg`, `exp_avg_sq`,
    `momentum_buffer`, `step`, ...), `param` the sanitized name of the
    parameter it belongs to, or empty for state of the whole step (the step
    counter).  An argument and a result with equal attributes are the value
    before and after the step.  `init` is the value of every element before
    the first step (0 when omitted; the loss scaler's state starts elsewhere,
    e.g. `#sharc.state<"", "loss_scale", init = 65536.0>`).
  }];
  let parameters = (ins StringRefParameter<"parameter name">:$param,
                        StringRefParameter<"kind of state">:$role,
                        Sharc_F64Parameter:$init);
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$param, "::llvm::StringRef":$role,
                     CArg<"double", "0.0">:$init), [{
      return $_get($_ctxt, param, role, ::llvm::APFloat(init));
    }]>
  ];
  let extraClassDeclaration = [{
    /// `init` as a double.
    double getInitValue() const { return getInit().convertToDouble(); }
  }];
  let assemblyFormat = "`<` $param `,` $role (`,` `init` `=` $init^)? `>`";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Sharc_FutureType : TypeDef<Sharc_Dialect, "Future"> {
  let mnemonic = "future";
  let summary = "the result of a collective in flight";
  let description = [{
    `!sharc.future<tensor<16xf32>>` is the token of an asynchronous
    collective (`sharc.all_reduce_start`): the tensor it produces, which no op
    may read until `sharc.wait` has waited for it.  The ops between the start
    and the wait are what the communication overlaps; sharc-schedule-collectives
    places both.  A future is waited for exactly once, in the block that
    started it.  In memory it is the buffer the collective writes, which the
    wait's result then names.
  }];
  let parameters = (ins "::mlir::RankedTensorType":$valueType);
  let builders = [
    TypeBuilderWithInferredContext<(ins "::mlir::RankedTensorType":$valueType),
                                   [{ return $_get(valueType.getContext(), valueType); }]>
  ];
  let assemblyFormat = "`<` $valueType `>`";
  let genVerifyDecl = 1;
}

#endif // SHARC_DIALECT_TD
