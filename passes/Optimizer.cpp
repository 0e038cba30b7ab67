//===- Optimizer.cpp - the training step ----------------------------------===//
//
// Builds @train_step around the gradient function that sharc-autodiff makes:
// micro-batch slicing and gradient accumulation, global-norm clipping, the
// learning-rate schedule and the optimizer update, with DeepSpeed's semantics
// (docs/training.md is the contract, docs/optimizers.md the formulas).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Schedule.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"

#include <array>
#include <numeric>

namespace sharc {
#define GEN_PASS_DEF_OPTIMIZER
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

std::optional<OptimizerKind> sharc::parseOptimizerKind(StringRef name) {
  return llvm::StringSwitch<std::optional<OptimizerKind>>(name)
      .Case("sgd", OptimizerKind::sgd)
      .Case("adam", OptimizerKind::adam)
      .Case("adamw", OptimizerKind::adamw)
      .Default(std::nullopt);
}

StringRef sharc::stringifyOptimizerKind(OptimizerKind kind) {
  switch (kind) {
  case OptimizerKind::sgd:
    return "sgd";
  case OptimizerKind::adam:
    return "adam";
  case OptimizerKind::adamw:
    return "adamw";
  }
  llvm_unreachable("unknown optimizer");
}

std::optional<SchedulerKind> sharc::parseSchedulerKind(StringRef name) {
  return llvm::StringSwitch<std::optional<SchedulerKind>>(name)
      .Case("none", SchedulerKind::none)
      .Case("warmup-lr", SchedulerKind::warmupLR)
      .Case("warmup-decay-lr", SchedulerKind::warmupDecayLR)
      .Case("warmup-cosine-lr", SchedulerKind::warmupCosineLR)
      .Case("one-cycle", SchedulerKind::oneCycle)
      .Case("lr-range-test", SchedulerKind::lrRangeTest)
      .Default(std::nullopt);
}

StringRef sharc::stringifySchedulerKind(SchedulerKind kind) {
  switch (kind) {
  case SchedulerKind::none:
    return "none";
  case SchedulerKind::warmupLR:
    return "warmup-lr";
  case SchedulerKind::warmupDecayLR:
    return "warmup-decay-lr";
  case SchedulerKind::warmupCosineLR:
    return "warmup-cosine-lr";
  case SchedulerKind::oneCycle:
    return "one-cycle";
  case SchedulerKind::lrRangeTest:
    return "lr-range-test";
  }
  llvm_unreachable("unknown schedule");
}

OptimizerOptions::OptimizerOptions(const TrainingOptions &options)
    : function(options.function) {
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  FIELD = options.FIELD;
#define SHARC_SCHEDULE_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  FIELD = options.scheduler.FIELD;
#define SHARC_CHOICE_OPTION(FIELD, NAME, DESC, KEY)
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"
  optimizer = stringifyOptimizerKind(options.optimizer).str();
  scheduler = stringifySchedulerKind(options.scheduler.kind).str();
  warmupType = options.scheduler.warmupLinear ? "linear" : "log";
}

const OptimizerOptions &OptimizerOptions::defaults() {
  static const OptimizerOptions options;
  return options;
}

FailureOr<TrainingOptions>
OptimizerOptions::parse(function_ref<InFlightDiagnostic()> emitError) const {
  TrainingOptions options;
  options.function = function;
#define SHARC_TRAINING_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  options.FIELD = FIELD;
#define SHARC_SCHEDULE_OPTION(FIELD, NAME, TYPE, DESC, KEY)                    \
  options.scheduler.FIELD = FIELD;
#define SHARC_CHOICE_OPTION(FIELD, NAME, DESC, KEY)
#define SHARC_PARALLEL_OPTION(FIELD, NAME, TYPE, DESC, KEY)
#include "ir/TrainingOptions.def"

  std::optional<OptimizerKind> optimizerKind = parseOptimizerKind(optimizer);
  if (!optimizerKind)
    return emitError() << "unknown optimizer '" << optimizer
                       << "' (expected sgd, adam or adamw)";
  options.optimizer = *optimizerKind;
  std::optional<SchedulerKind> schedulerKind = parseSchedulerKind(scheduler);
  if (!schedulerKind)
    return emitError() << "unknown scheduler '" << scheduler
                       << "' (expected none, warmup-lr, warmup-decay-lr, "
                          "warmup-cosine-lr, one-cycle or lr-range-test)";
  options.scheduler.kind = *schedulerKind;
  if (warmupType != "log" && warmupType != "linear")
    return emitError() << "unknown warmup type '" << warmupType
                       << "' (expected log or linear)";
  options.scheduler.warmupLinear = warmupType == "linear";
  return options;
}

LogicalResult
sharc::verifyTrainingOptions(const TrainingOptions &options,
                             function_ref<InFlightDiagnostic()> emitError) {
  if (options.function.empty())
    return emitError() << "option 'function' must name the forward function";
  OptionChecker check(emitError);
  if (!check.atLeast("lr", options.lr, 0) ||
      !check.beta("beta1", options.beta1) ||
      !check.beta("beta2", options.beta2) ||
      !check.atLeast("weight-decay", options.weightDecay, 0) ||
      !check.atLeast("momentum", options.momentum, 0) ||
      !check.inRange("grad-accum", options.gradAccum, 1,
                     TrainingOptions::kMaxGradAccum) ||
      !check.atLeast("clip", options.clip, 0) ||
      !check.inRange("world-size", options.worldSize, 1,
                     TrainingOptions::kMaxWorldSize) ||
      !check.inRange("reduce-bucket-size", options.reduceBucketSize, 1,
                     TrainingOptions::kMaxBucketSize) ||
      !check.positive("eps", options.eps))
    return failure();
  if (options.optimizer == OptimizerKind::sgd && options.nesterov &&
      options.momentum == 0)
    return emitError() << "option 'nesterov' needs a positive 'momentum'";
  return verifySchedulerOptions(options, emitError);
}

//===----------------------------------------------------------------------===//
// The gradient function
//===----------------------------------------------------------------------===//

namespace {
/// The signature of `@F_grad` (docs/training.md): `@F`'s arguments then the
/// loss seed; the loss then one gradient per trainable parameter.
struct GradSignature {
  /// Argument indices of the parameters, trainable or frozen, in order.
  SmallVector<unsigned> params;
  /// Argument indices of the data inputs, in order.
  SmallVector<unsigned> inputs;
  /// Per entry of `params`: the result index of its gradient, 0 if frozen.
  SmallVector<unsigned> gradients;
  /// Argument indices of the random ops' key (`sharc.random_key`): the step
  /// counter and the global batch rows of the micro-batch.
  std::optional<unsigned> randomStep, randomRows;
  /// Buffers the forward pass updates (`sharc.buffer`): the result that is
  /// the new value, and the position in `params` of the argument.
  SmallVector<std::pair<unsigned, unsigned>> buffers;
};
} // namespace

/// Checks that `func` has the signature of a gradient function and returns
/// its parts.
static FailureOr<GradSignature> analyzeGradFunction(func::FuncOp func) {
  FunctionType type = func.getFunctionType();
  unsigned numArgs = type.getNumInputs();
  RankedTensorType seedType;
  StringAttr seedName;
  if (numArgs) {
    seedType = dyn_cast<RankedTensorType>(type.getInput(numArgs - 1));
    seedName = func.getArgAttrOfType<StringAttr>(
        numArgs - 1, SharcDialect::getInputAttrName());
  }
  if (!seedType || seedType.getRank() != 0 ||
      !isa<FloatType>(seedType.getElementType()) || !seedName ||
      seedName.getValue() != "loss_seed")
    return func.emitError() << "the last argument of a gradient function must "
                               "be the scalar float input 'loss_seed'";
  if (type.getNumResults() == 0 || type.getResult(0) != seedType)
    return func.emitError() << "the first result of a gradient function must "
                               "be the loss, of the loss seed's type "
                            << seedType;

  GradSignature signature;
  llvm::StringMap<unsigned> paramPosition;
  for (unsigned i = 0; i + 1 < numArgs; ++i) {
    StringRef role = getRandomKeyRole(func, i);
    if (ParamAttr param = getParamAttr(func, i)) {
      paramPosition[param.getName()] = signature.params.size();
      signature.params.push_back(i);
    } else if (!role.empty()) {
      (role == "step" ? signature.randomStep : signature.randomRows) = i;
    } else {
      signature.inputs.push_back(i);
    }
  }
  if (signature.randomStep.has_value() != signature.randomRows.has_value())
    return func.emitError() << "a gradient function's random key needs "
                               "both a 'step' and a 'rows' argument";
  signature.gradients.assign(signature.params.size(), 0);
  for (unsigned r = 1; r < type.getNumResults(); ++r) {
    if (auto buffer = func.getResultAttrOfType<ParamAttr>(
            r, SharcDialect::getParamAttrName())) {
      auto it = paramPosition.find(buffer.getName());
      if (it == paramPosition.end() ||
          !isBuffer(func, signature.params[it->second]) ||
          type.getInput(signature.params[it->second]) != type.getResult(r))
        return func.emitError()
               << "result #" << r << " is the new value of '"
               << buffer.getName()
               << "', which is no buffer argument (sharc.buffer) of its type";
      signature.buffers.push_back({r, it->second});
      continue;
    }
    auto name = func.getResultAttrOfType<StringAttr>(
        r, SharcDialect::getGradAttrName());
    if (!name)
      return func.emitError()
             << "result #" << r << " of a gradient function has no '"
             << SharcDialect::getGradAttrName() << "'";
    auto it = paramPosition.find(name.getValue());
    if (it == paramPosition.end())
      return func.emitError()
             << "result #" << r << " is the gradient of '" << name.getValue()
             << "', which is no parameter argument";
    unsigned &gradient = signature.gradients[it->second];
    if (gradient)
      return func.emitError()
             << "parameter '" << name.getValue() << "' has two gradients";
    Type paramType = type.getInput(signature.params[it->second]);
    if (type.getResult(r) != paramType)
      return func.emitError()
             << "the gradient of '" << name.getValue() << "' has type "
             << type.getResult(r) << ", its parameter " << paramType;
    gradient = r;
  }
  return signature;
}

//===----------------------------------------------------------------------===//
// Clipping and updates
//===----------------------------------------------------------------------===//

/// The global L2 norm of the gradients, f64 (null without gradients).
/// Squares are summed in f32 (f64 for f64 gradients); the per-tensor sums and
/// the norm are f64.  Every step returns it (the `grad_norm` output, which
/// the metrics and monitors report) and clipping scales by it.
static Value globalGradNorm(MathBuilder &math, ArrayRef<Value> grads) {
  ImplicitLocOpBuilder &builder = math.getBuilder();
  Value sumOfSquares;
  for (Value grad : grads) {
    Value wide = elementTypeOf(grad).isF64()
                     ? grad
                     : math.cast(grad, builder.getF32Type());
    SmallVector<int64_t> axes(cast<RankedTensorType>(grad.getType()).getRank());
    std::iota(axes.begin(), axes.end(), 0);
    Value sum =
        ReduceOp::create(builder, math.mul(wide, wide), ReduceKind::sum, axes);
    sum = math.cast(sum, builder.getF64Type());
    sumOfSquares = sumOfSquares ? math.add(sumOfSquares, sum) : sum;
  }
  return sumOfSquares ? math.sqrt(sumOfSquares) : Value();
}

/// DeepSpeed's clipping: every gradient times 1 / max(1, (norm + 1e-6) /
/// clip), norm the global L2 norm (globalGradNorm); the coefficient is f64.
static void clipByGlobalNorm(MathBuilder &math, MutableArrayRef<Value> grads,
                             Value norm, double clip) {
  Value combined = math.max(
      math.f64(1), math.div(math.add(norm, math.f64(1e-6)), math.f64(clip)));
  Value coefficient = math.div(math.f64(1), combined);
  for (Value &grad : grads)
    grad = math.mul(grad, math.cast(coefficient, elementTypeOf(grad)));
}

namespace {
/// The f64 scalars of one update: the learning rate, and Adam's betas and
/// bias corrections 1 - beta^(t+1) (null without bias correction).
struct StepScalars {
  Value lr, beta1, beta2, correction1, correction2;
};

/// The scalars of the update in one element type (the parameter's), in
/// which the update computes, as FusedAdam's kernel does in f32.
struct TypedScalars {
  Value lr, beta1, oneMinusBeta1, beta2, oneMinusBeta2, correction1,
      correction2, eps, weightDecay, momentum;
};

/// Builds the optimizer update of each trainable parameter.
class UpdateBuilder {
public:
  UpdateBuilder(MathBuilder &math, const TrainingOptions &options,
                StepScalars step)
      : math(math), options(options), step(step) {}

  /// AdamW/Adam (FusedAdam): returns the new parameter, exp_avg and
  /// exp_avg_sq.
  std::array<Value, 3> adam(Value param, Value grad, Value expAvg,
                            Value expAvgSq);
  /// SGD (torch.optim.SGD, dampening 0): returns the new parameter and, with
  /// momentum, the new momentum buffer.
  std::pair<Value, Value> sgd(Value param, Value grad, Value buffer);

private:
  const TypedScalars &scalars(Type elementType);

  MathBuilder &math;
  const TrainingOptions &options;
  StepScalars step;
  llvm::DenseMap<Type, TypedScalars> byType;
};
} // namespace

const TypedScalars &UpdateBuilder::scalars(Type elementType) {
  auto [it, inserted] = byType.try_emplace(elementType);
  TypedScalars &typed = it->second;
  if (!inserted)
    return typed;
  typed.lr = math.cast(step.lr, elementType);
  if (options.weightDecay != 0)
    typed.weightDecay = math.constant(elementType, options.weightDecay);
  if (options.optimizer == OptimizerKind::sgd) {
    if (options.momentum != 0)
      typed.momentum = math.constant(elementType, options.momentum);
    return typed;
  }
  Value one = math.constant(elementType, 1);
  typed.beta1 = math.cast(step.beta1, elementType);
  typed.oneMinusBeta1 = math.sub(one, typed.beta1);
  typed.beta2 = math.cast(step.beta2, elementType);
  typed.oneMinusBeta2 = math.sub(one, typed.beta2);
  typed.eps = math.constant(elementType, options.eps);
  if (step.correction1) {
    typed.correction1 = math.cast(step.correction1, elementType);
    typed.correction2 = math.cast(step.correction2, elementType);
  }
  return typed;
}

std::array<Value, 3> UpdateBuilder::adam(Value param, Value grad, Value expAvg,
                                         Value expAvgSq) {
  const TypedScalars &s = scalars(elementTypeOf(param));
  bool decoupled =
      options.optimizer == OptimizerKind::adamw || options.adamWMode;
  bool decays = options.weightDecay != 0;
  if (decays && !decoupled)
    grad = math.add(grad, math.mul(s.weightDecay, param));
  Value m =
      math.add(math.mul(s.beta1, expAvg), math.mul(s.oneMinusBeta1, grad));
  Value v = math.add(math.mul(s.beta2, expAvgSq),
                     math.mul(math.mul(s.oneMinusBeta2, grad), grad));
  Value mHat = s.correction1 ? math.div(m, s.correction1) : m;
  Value vHat = s.correction2 ? math.div(v, s.correction2) : v;
  Value update = math.div(mHat, math.add(math.sqrt(vHat), s.eps));
  if (decays && decoupled)
    update = math.add(update, math.mul(s.weightDecay, param));
  return {math.sub(param, math.mul(s.lr, update)), m, v};
}

std::pair<Value, Value> UpdateBuilder::sgd(Value param, Value grad,
                                           Value buffer) {
  const TypedScalars &s = scalars(elementTypeOf(param));
  if (options.weightDecay != 0)
    grad = math.add(grad, math.mul(s.weightDecay, param));
  if (buffer) {
    // A zero buffer makes the first step's buffer the gradient, as
    // PyTorch's clone of the first gradient does.
    buffer = math.add(math.mul(s.momentum, buffer), grad);
    grad = options.nesterov ? math.add(grad, math.mul(s.momentum, buffer))
                            : buffer;
  }
  return {math.sub(param, math.mul(s.lr, grad)), buffer};
}

//===----------------------------------------------------------------------===//
// The training step
//===----------------------------------------------------------------------===//

/// Roles of the optimizer state of each trainable parameter.
static SmallVector<StringRef, 2> stateRoles(const TrainingOptions &options) {
  if (options.optimizer != OptimizerKind::sgd)
    return {"exp_avg", "exp_avg_sq"};
  if (options.momentum != 0)
    return {"momentum_buffer"};
  return {};
}

namespace {
/// Where things are in `@train_step`'s signature: arguments are the
/// parameters, the state (per trainable parameter, per role), the step
/// counter, the data inputs; results the loss, the trainable parameters, the
/// state, the step counter, the learning rate.
struct StepLayout {
  StepLayout(const GradSignature &signature, const TrainingOptions &options)
      : signature(signature), roles(stateRoles(options)) {
    for (auto [position, gradient] : llvm::enumerate(signature.gradients))
      if (gradient)
        trainable.push_back(position);
  }

  unsigned firstState() const { return signature.params.size(); }
  unsigned numState() const { return trainable.size() * roles.size(); }
  unsigned stepArg() const { return firstState() + numState(); }
  unsigned firstInput() const { return stepArg() + 1; }
  unsigned firstStateResult() const { return 1 + trainable.size(); }
  unsigned stepResult() const { return firstStateResult() + numState(); }

  const GradSignature &signature;
  SmallVector<StringRef, 2> roles;
  /// Positions (in signature.params) of the trainable parameters.
  SmallVector<unsigned> trainable;
};
} // namespace

/// Creates the empty `@train_step` after `gradFunc`, with its signature and
/// signature attributes.
static FailureOr<func::FuncOp> createStepFunction(func::FuncOp gradFunc,
                                                  const StepLayout &layout,
                                                  int64_t microBatches) {
  MLIRContext *context = gradFunc.getContext();
  FunctionType gradType = gradFunc.getFunctionType();
  const GradSignature &signature = layout.signature;
  auto stepType = RankedTensorType::get({}, IntegerType::get(context, 64));
  auto lrType = RankedTensorType::get({}, Float64Type::get(context));

  SmallVector<Type> argTypes, resultTypes{gradType.getResult(0)};
  for (unsigned arg : signature.params)
    argTypes.push_back(gradType.getInput(arg));
  for (unsigned position : layout.trainable) {
    Type type = gradType.getInput(signature.params[position]);
    resultTypes.push_back(type);
    argTypes.append(layout.roles.size(), type);
  }
  resultTypes.append(argTypes.begin() + layout.firstState(), argTypes.end());
  argTypes.push_back(stepType);
  resultTypes.append({stepType, lrType});
  // The gradients' global norm, where there are gradients.
  if (!layout.trainable.empty())
    resultTypes.push_back(lrType);
  for (auto [result, position] : signature.buffers)
    resultTypes.push_back(gradType.getInput(signature.params[position]));
  for (unsigned arg : signature.inputs) {
    auto type = cast<RankedTensorType>(gradType.getInput(arg));
    auto name = gradFunc.getArgAttrOfType<StringAttr>(
        arg, SharcDialect::getInputAttrName());
    std::string what = name ? "data input '" + name.str() + "'"
                            : "data input #" + std::to_string(arg);
    if (type.getNumElements() == 0)
      return gradFunc.emitError()
             << what << " has no elements (type " << type
             << "): a training step needs at least one row of every input";
    if (microBatches > 1 && type.getRank() == 0)
      return gradFunc.emitError()
             << what << " is a scalar: it cannot be split "
             << "into " << microBatches << " micro-batches";
    SmallVector<int64_t> shape(type.getShape());
    if (microBatches > 1) {
      shape[0] *= microBatches;
      if (!checkedNumElements(shape))
        return gradFunc.emitError()
               << what << " of type " << type << " in " << microBatches
               << " micro-batches would have more than " << kMaxElements
               << " elements";
    }
    argTypes.push_back(type.clone(shape));
  }

  OpBuilder builder(context);
  builder.setInsertionPointAfter(gradFunc);
  auto step =
      func::FuncOp::create(builder, gradFunc.getLoc(), "train_step",
                           FunctionType::get(context, argTypes, resultTypes));

  // Parameters and data inputs keep their attributes.
  auto copyArgAttrs = [&](unsigned to, unsigned from) {
    if (DictionaryAttr attrs = gradFunc.getArgAttrDict(from))
      step.setArgAttrs(to, attrs);
  };
  for (auto [index, arg] : llvm::enumerate(signature.params))
    copyArgAttrs(index, arg);
  for (auto [index, arg] : llvm::enumerate(signature.inputs))
    copyArgAttrs(layout.firstInput() + index, arg);

  StringAttr stateName =
      builder.getStringAttr(SharcDialect::getStateAttrName());
  StringAttr outputName =
      builder.getStringAttr(SharcDialect::getOutputAttrName());
  step.setResultAttr(0, outputName, builder.getStringAttr("loss"));
  unsigned state = 0;
  for (auto [index, position] : llvm::enumerate(layout.trainable)) {
    ParamAttr param = getParamAttr(gradFunc, signature.params[position]);
    step.setResultAttr(1 + index, SharcDialect::getParamAttrName(), param);
    for (StringRef role : layout.roles) {
      auto attr = StateAttr::get(context, param.getName(), role);
      step.setArgAttr(layout.firstState() + state, stateName, attr);
      step.setResultAttr(layout.firstStateResult() + state, stateName, attr);
      ++state;
    }
  }
  auto stepAttr = StateAttr::get(context, "", "step");
  step.setArgAttr(layout.stepArg(), stateName, stepAttr);
  step.setResultAttr(layout.stepResult(), stateName, stepAttr);
  step.setResultAttr(layout.stepResult() + 1, outputName,
                     builder.getStringAttr("lr"));
  if (!layout.trainable.empty())
    step.setResultAttr(layout.stepResult() + 2, outputName,
                       builder.getStringAttr("grad_norm"));
  // The buffers' new values come last.
  unsigned firstBuffer = resultTypes.size() - layout.signature.buffers.size();
  for (auto [index, buffer] : llvm::enumerate(layout.signature.buffers))
    step.setResultAttr(firstBuffer + index, SharcDialect::getParamAttrName(),
                       getParamAttr(gradFunc, signature.params[buffer.second]));
  return step;
}

namespace {
/// What the micro-batches of a step give: the mean loss, the summed gradient
/// of each trainable parameter, the new value of each buffer.
struct Accumulated {
  Value loss;
  SmallVector<Value> grads, buffers;
};
} // namespace

/// Calls `gradFunc` on each micro-batch, rows [k * micro, (k + 1) * micro)
/// of every data input, with loss_seed 1/G (sharc-data-parallel makes it
/// 1/(G N) for N ranks).  Returns the mean
/// loss, the summed gradient of each trainable parameter and the buffers'
/// new values (each micro-batch updates the previous one's, as consecutive
/// forward passes of PyTorch do).  With G > 1 the calls are one
/// `sharc.micro_batch_loop` that carries the sums (starting from zeros) and
/// the buffers, so the step does not grow with G.
static Accumulated accumulateGradients(MathBuilder &math, func::FuncOp gradFunc,
                                       const StepLayout &layout, Block *entry,
                                       int64_t microBatches) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  FunctionType gradType = gradFunc.getFunctionType();
  const GradSignature &signature = layout.signature;
  Type lossElement =
      cast<RankedTensorType>(gradType.getResult(0)).getElementType();
  Value seed =
      math.constant(lossElement, lossSeedValue(microBatches, /*worldSize=*/1));
  SmallVector<Value> inputs;
  for (size_t index = 0; index < signature.inputs.size(); ++index)
    inputs.push_back(entry->getArgument(layout.firstInput() + index));
  // The random ops' key: the step counter, and the global batch rows of
  // this rank's share, split into micro-batches like the data.
  Value counter = entry->getArgument(layout.stepArg());
  if (signature.randomRows) {
    auto rowsType =
        cast<RankedTensorType>(gradType.getInput(*signature.randomRows));
    inputs.push_back(SampleRowsOp::create(
        b, rowsType.clone({rowsType.getDimSize(0) * microBatches})));
  }

  // Calls the gradient function on one micro-batch with the buffers'
  // current values; returns its loss, the gradients of the trainable
  // parameters and the buffers' new values.
  auto callOn = [&](ValueRange micro, ValueRange buffers) {
    SmallVector<Value> operands(gradType.getNumInputs());
    for (auto [index, arg] : llvm::enumerate(signature.params))
      operands[arg] = entry->getArgument(index);
    for (auto [buffer, value] : llvm::zip(signature.buffers, buffers))
      operands[signature.params[buffer.second]] = value;
    for (auto [arg, data] : llvm::zip(signature.inputs, micro))
      operands[arg] = data;
    if (signature.randomRows) {
      operands[*signature.randomStep] = counter;
      operands[*signature.randomRows] = micro.back();
    }
    operands.back() = seed;
    auto call = func::CallOp::create(b, gradFunc, operands);
    SmallVector<Value> values{call.getResult(0)};
    for (unsigned position : layout.trainable)
      values.push_back(call.getResult(signature.gradients[position]));
    for (auto [result, position] : signature.buffers)
      values.push_back(call.getResult(result));
    return values;
  };
  SmallVector<Value> buffers;
  for (auto [result, position] : signature.buffers)
    buffers.push_back(entry->getArgument(position));
  size_t numSums = 1 + layout.trainable.size();
  auto split = [&](ValueRange values) {
    return Accumulated{values[0],
                       SmallVector<Value>(values.slice(1, numSums - 1)),
                       SmallVector<Value>(values.drop_front(numSums))};
  };
  if (microBatches == 1)
    return split(callOn(inputs, buffers));

  SmallVector<Value> inits;
  SmallVector<Type> carriedTypes;
  inits.push_back(math.constant(lossElement, 0.0));
  for (unsigned position : layout.trainable) {
    auto type =
        cast<RankedTensorType>(gradType.getInput(signature.params[position]));
    inits.push_back(ConstantOp::create(
        b, DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType()))));
  }
  llvm::append_range(inits, buffers);
  for (Value init : inits)
    carriedTypes.push_back(init.getType());
  auto loop = MicroBatchLoopOp::create(b, carriedTypes, inputs, inits,
                                       b.getI64IntegerAttr(microBatches));
  SmallVector<Type> argTypes;
  SmallVector<Location> argLocs;
  for (Value input : inputs) {
    auto type = cast<RankedTensorType>(input.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[0] /= microBatches;
    argTypes.push_back(type.clone(shape));
    argLocs.push_back(b.getLoc());
  }
  argTypes.append(carriedTypes);
  argLocs.append(carriedTypes.size(), b.getLoc());
  {
    OpBuilder::InsertionGuard guard(b);
    Block *body = b.createBlock(&loop.getBody(), {}, argTypes, argLocs);
    ValueRange carried = body->getArguments().drop_front(inputs.size());
    SmallVector<Value> values =
        callOn(body->getArguments().take_front(inputs.size()),
               carried.drop_front(numSums));
    SmallVector<Value> yielded;
    for (auto [sum, value] : llvm::zip(carried.take_front(numSums), values))
      yielded.push_back(math.add(sum, value));
    yielded.append(values.begin() + numSums, values.end());
    YieldOp::create(b, yielded);
  }
  Accumulated accumulated = split(loop.getResults());
  accumulated.loss =
      math.div(accumulated.loss,
               math.constant(lossElement, static_cast<double>(microBatches)));
  return accumulated;
}

/// The learning rate of step `counter` and, for Adam, the betas and bias
/// corrections.
static StepScalars buildStepScalars(MathBuilder &math, Value counter,
                                    const TrainingOptions &options) {
  Value t = math.cast(counter, math.getBuilder().getF64Type());
  ScheduledValues schedule = buildSchedule(math, t, options);
  StepScalars scalars{schedule.lr, {}, {}, {}, {}};
  if (options.optimizer != OptimizerKind::sgd) {
    scalars.beta1 = schedule.beta1 ? schedule.beta1 : math.f64(options.beta1);
    scalars.beta2 = schedule.beta2 ? schedule.beta2 : math.f64(options.beta2);
    if (options.biasCorrection) {
      Value next = math.add(t, math.f64(1));
      scalars.correction1 =
          math.sub(math.f64(1), math.pow(scalars.beta1, next));
      scalars.correction2 =
          math.sub(math.f64(1), math.pow(scalars.beta2, next));
    }
  }
  // Without a schedule, SGD never reads the step counter.
  if (t.use_empty())
    t.getDefiningOp()->erase();
  return scalars;
}

FailureOr<func::FuncOp> sharc::buildTrainStep(ModuleOp module,
                                              const TrainingOptions &options) {
  if (failed(
          verifyTrainingOptions(options, [&] { return module.emitError(); })))
    return failure();
  std::string gradName = options.function + "_grad";
  auto gradFunc = module.lookupSymbol<func::FuncOp>(gradName);
  if (!gradFunc)
    return module.emitError() << "no gradient function '@" << gradName
                              << "' (sharc-autodiff makes it)";
  if (Operation *existing = module.lookupSymbol("train_step"))
    return existing->emitError()
           << "cannot build the training step: '@train_step' already exists";
  FailureOr<GradSignature> signature = analyzeGradFunction(gradFunc);
  if (failed(signature))
    return failure();
  StepLayout layout(*signature, options);
  FailureOr<func::FuncOp> step =
      createStepFunction(gradFunc, layout, options.gradAccum);
  if (failed(step))
    return failure();

  Block *entry = step->addEntryBlock();
  auto b = ImplicitLocOpBuilder::atBlockEnd(gradFunc.getLoc(), entry);
  MathBuilder math(b);
  auto [loss, grads, buffers] =
      accumulateGradients(math, gradFunc, layout, entry, options.gradAccum);
  // Where the gradients are complete on this rank: sharc-data-parallel (or
  // a ZeRO pass) decides how they become global.
  if (!grads.empty()) {
    SmallVector<Attribute> params;
    for (unsigned position : layout.trainable)
      params.push_back(b.getStringAttr(
          getParamAttr(gradFunc, signature->params[position]).getName()));
    auto marker = GradientsOp::create(b, ValueRange(grads).getTypes(), grads,
                                      b.getArrayAttr(params));
    grads.assign(marker.getResults().begin(), marker.getResults().end());
  }
  Value norm = globalGradNorm(math, grads);
  if (norm && options.clip > 0)
    clipByGlobalNorm(math, grads, norm, options.clip);
  Value counter = entry->getArgument(layout.stepArg());
  StepScalars scalars = buildStepScalars(math, counter, options);

  UpdateBuilder update(math, options, scalars);
  SmallVector<Value> newParams, newState;
  size_t numRoles = layout.roles.size();
  for (auto [index, position] : llvm::enumerate(layout.trainable)) {
    Value param = entry->getArgument(position);
    ValueRange state = entry->getArguments().slice(
        layout.firstState() + index * numRoles, numRoles);
    if (options.optimizer == OptimizerKind::sgd) {
      auto [newParam, buffer] =
          update.sgd(param, grads[index], numRoles ? state[0] : Value());
      newParams.push_back(newParam);
      if (buffer)
        newState.push_back(buffer);
      continue;
    }
    auto [newParam, expAvg, expAvgSq] =
        update.adam(param, grads[index], state[0], state[1]);
    newParams.push_back(newParam);
    newState.append({expAvg, expAvgSq});
  }

  SmallVector<Value> results{loss};
  results.append(newParams);
  results.append(newState);
  results.push_back(math.add(counter, math.constant(b.getI64Type(), 1)));
  results.push_back(scalars.lr);
  if (norm)
    results.push_back(norm);
  results.append(buffers);
  func::ReturnOp::create(b, results);
  return *step;
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct OptimizerPass
    : WithOptimizerOptions<sharc::impl::OptimizerBase<OptimizerPass>> {
  OptimizerPass() = default;
  OptimizerPass(const OptimizerPass &other) : WithOptimizerOptions(other) {}
  explicit OptimizerPass(const OptimizerOptions &options) {
    setOptimizerOptions(options);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<TrainingOptions> options =
        getOptimizerOptions().parse([&] { return module.emitError(); });
    if (failed(options) || failed(buildTrainStep(module, *options)))
      signalPassFailure();
  }
};
} // namespace

std::unique_ptr<Pass>
sharc::createOptimizerPass(const OptimizerOptions &options) {
  return std::make_unique<OptimizerPass>(options);
}

std::unique_ptr<Pass>
sharc::createOptimizerPass(const TrainingOptions &options) {
  return createOptimizerPass(OptimizerOptions(options));
}
