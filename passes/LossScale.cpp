//===- LossScale.cpp - DeepSpeed's dynamic loss scaler in the IR ----------===//
//
// The scaler's update as select-based sharc arithmetic (no control flow), so
// that a step that overflows and one that does not run the same ops.
//
//===----------------------------------------------------------------------===//

#include "passes/LossScale.h"
#include "passes/Passes.h"

#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace sharc;

LossScaleUpdate sharc::buildLossScaleUpdate(MathBuilder &math,
                                            const LossScaleState &state,
                                            Value overflow,
                                            const LossScaleOptions &options) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  Type i64 = b.getI64Type(), f64 = b.getF64Type(), i1 = b.getI1Type();
  auto both = [&](Value lhs, Value rhs) { return AndOp::create(b, lhs, rhs); };
  Value one = math.constant(i64, 1), zero = math.constant(i64, 0);
  Value refilled = math.constant(i64, static_cast<double>(options.hysteresis));
  Value minScale = math.constant(f64, options.minScale);
  Value two = math.constant(f64, 2.0);

  // Overflow: halve now (delayed_shift == 1 or cur_hysteresis == 1), or
  // spend one unit of hysteresis.
  Value halveNow = options.hysteresis == 1 ? math.constant(i1, 1.0)
                                           : math.compare(state.hysteresis, one,
                                                          ComparePredicate::eq);
  Value atMinimum =
      both(overflow, both(halveNow, math.compare(state.scale, minScale,
                                                 ComparePredicate::eq)));
  Value halved = math.max(math.div(state.scale, two), minScale);
  Value scaleOnOverflow = math.select(halveNow, halved, state.scale);
  Value hysteresisOnOverflow =
      math.select(halveNow, state.hysteresis, math.sub(state.hysteresis, one));

  // Clean step: the scale doubles after `window` clean steps since the last
  // overflow (stable > 0 and stable % window == 0; stable > 0, so the
  // truncating division is the floor).
  Value stable = math.sub(math.sub(state.iter, state.lastOverflow), one);
  Value window = math.constant(i64, static_cast<double>(options.window));
  Value remainder =
      math.sub(stable, math.mul(math.div(stable, window), window));
  Value grow = both(math.compare(stable, zero, ComparePredicate::gt),
                    math.compare(remainder, zero, ComparePredicate::eq));
  Value scaleOnClean =
      math.select(grow, math.mul(state.scale, two), state.scale);
  Value hysteresisOnClean = options.consecutiveHysteresis
                                ? refilled
                                : math.select(grow, refilled, state.hysteresis);

  LossScaleUpdate update;
  update.next.scale = math.select(overflow, scaleOnOverflow, scaleOnClean);
  update.next.hysteresis =
      math.select(overflow, hysteresisOnOverflow, hysteresisOnClean);
  update.next.lastOverflow =
      math.select(overflow, state.iter, state.lastOverflow);
  update.next.iter = math.add(state.iter, one);
  update.atMinimum = atMinimum;
  return update;
}

//===----------------------------------------------------------------------===//
// sharc-loss-scale
//===----------------------------------------------------------------------===//

namespace sharc {
#define GEN_PASS_DEF_LOSSSCALING
#include "passes/Passes.h.inc"
} // namespace sharc

namespace {
/// A piece of state the pass adds to `@train_step`.
struct NewState {
  StringRef role;
  Type type;
  double init;
};
} // namespace

/// The index of the argument (or, with `result`, the result) of `step` that
/// holds state `role` of the whole step, if any.
static std::optional<unsigned> findStepState(func::FuncOp step, StringRef role,
                                             bool result) {
  unsigned count = result ? step.getNumResults() : step.getNumArguments();
  for (unsigned i = 0; i < count; ++i) {
    auto state = result ? step.getResultAttrOfType<StateAttr>(
                              i, SharcDialect::getStateAttrName())
                        : step.getArgAttrOfType<StateAttr>(
                              i, SharcDialect::getStateAttrName());
    if (state && state.getParam().empty() && state.getRole() == role)
      return i;
  }
  return std::nullopt;
}

/// True when `call` calls a gradient function (its last argument is the
/// loss seed).
static bool callsGradient(func::CallOp call, ModuleOp module) {
  auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
  unsigned numArgs = call.getNumOperands();
  if (!callee || numArgs == 0)
    return false;
  auto name = callee.getArgAttrOfType<StringAttr>(
      numArgs - 1, SharcDialect::getInputAttrName());
  return name && name.getValue() == "loss_seed";
}

/// Whether any element of `grads` is infinite or NaN, as a `tensor<i1>`:
/// g * 0 is 0 for every finite g and NaN otherwise, so the sum of g * 0 over
/// every gradient is NaN exactly when one element is not finite.  Appends
/// the ops that read `grads` to `readers`.
static Value anyNonFinite(MathBuilder &math, ValueRange grads,
                          llvm::SmallPtrSetImpl<Operation *> &readers) {
  ImplicitLocOpBuilder &b = math.getBuilder();
  Value total;
  for (Value grad : grads) {
    Value product = math.mul(grad, math.constant(elementTypeOf(grad), 0.0));
    readers.insert(product.getDefiningOp());
    SmallVector<int64_t> axes(cast<RankedTensorType>(grad.getType()).getRank());
    std::iota(axes.begin(), axes.end(), 0);
    Value sum = math.cast(ReduceOp::create(b, product, ReduceKind::sum, axes),
                          b.getF64Type());
    total = total ? math.add(total, sum) : sum;
  }
  return math.compare(total, total, ComparePredicate::ne);
}

LogicalResult sharc::applyLossScaling(ModuleOp module,
                                      const LossScalingOptions &options) {
  auto emitError = [&] { return module.emitError(); };
  OptionChecker check(emitError);
  if (!check.atLeast("loss-scale", options.lossScale, 0) ||
      !check.inRange("initial-scale-power", options.initialScalePower, 0,
                     LossScaleOptions::kMaxInitialScalePower) ||
      !check.inRange("loss-scale-window", options.lossScaleWindow, 1,
                     std::numeric_limits<int64_t>::max()) ||
      !check.inRange("hysteresis", options.hysteresis, 1,
                     std::numeric_limits<int64_t>::max()) ||
      !check.positive("min-loss-scale", options.minLossScale))
    return failure();
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError() << "sharc-loss-scale needs '@train_step' (run "
                                 "sharc-optimizer first)";
  if (findStepState(step, "skipped_steps", /*result=*/false))
    return step.emitError()
           << "sharc-loss-scale: '@train_step' already skips steps";
  SmallVector<GradientsOp> markers;
  step.walk([&](GradientsOp op) { markers.push_back(op); });
  if (markers.size() > 1)
    return markers[1].emitError()
           << "sharc-loss-scale: a step with more than one 'sharc.gradients'";
  // Nothing trains: no gradient to scale, nothing to skip.
  if (markers.empty())
    return success();
  GradientsOp marker = markers.front();
  std::optional<unsigned> counterArg = findStepState(step, "step", false);
  std::optional<unsigned> counterResult = findStepState(step, "step", true);
  if (!counterArg || !counterResult)
    return step.emitError() << "sharc-loss-scale: '@train_step' has no step "
                               "counter (#sharc.state<\"\", \"step\">)";

  MLIRContext *context = module.getContext();
  Builder types(context);
  Type f64 = types.getF64Type(), i64 = types.getI64Type();
  bool dynamic = options.scaling && options.lossScale == 0;
  double initialScale = std::ldexp(1.0, int(options.initialScalePower));
  SmallVector<NewState> added;
  if (dynamic)
    added.append({{"loss_scale", f64, initialScale},
                  {"loss_scale_hysteresis", i64, double(options.hysteresis)},
                  {"last_overflow_step", i64, -1.0}});
  added.push_back({"skipped_steps", i64, 0.0});

  // The state arguments, after the step counter.
  unsigned firstArg = *counterArg + 1;
  SmallVector<unsigned> argIndices(added.size(), firstArg);
  SmallVector<Type> stateTypes;
  SmallVector<DictionaryAttr> stateAttrs;
  SmallVector<Location> locs(added.size(), step.getLoc());
  for (const NewState &state : added) {
    stateTypes.push_back(RankedTensorType::get({}, state.type));
    stateAttrs.push_back(types.getDictionaryAttr(types.getNamedAttr(
        SharcDialect::getStateAttrName(),
        StateAttr::get(context, "", state.role, state.init))));
  }
  if (failed(step.insertArguments(argIndices, stateTypes, stateAttrs, locs)))
    return failure();
  Block &entry = step.getBody().front();
  Value counter = entry.getArgument(*counterArg);
  auto stateArg = [&](StringRef role) {
    for (auto [index, state] : llvm::enumerate(added))
      if (state.role == role)
        return entry.getArgument(firstArg + index);
    llvm_unreachable("no such state");
  };

  // Steps applied so far (the schedule's and Adam's t): steps taken minus
  // steps skipped.
  auto b = ImplicitLocOpBuilder::atBlockBegin(step.getLoc(), &entry);
  MathBuilder math(b);
  Value skipped = stateArg("skipped_steps");
  Value applied = math.sub(counter, skipped);
  counter.replaceUsesWithIf(applied, [&](OpOperand &use) {
    return use.getOwner() != applied.getDefiningOp();
  });

  // The loss seeds, times the scale.
  Value scale;
  if (options.scaling) {
    scale = dynamic ? stateArg("loss_scale") : math.f64(options.lossScale);
    llvm::DenseMap<Type, Value> seedScales;
    step.walk([&](func::CallOp call) {
      if (!callsGradient(call, module))
        return;
      OpOperand &seed = call->getOpOperand(call.getNumOperands() - 1);
      Type element = elementTypeOf(seed.get());
      Value &typed = seedScales[element];
      if (!typed) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointAfterValue(scale);
        typed = math.cast(scale, element);
      }
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(call);
      seed.set(math.mul(seed.get(), typed));
    });
  }

  // After the gradients: the overflow check, the scaler's update and the
  // unscaling.
  b.setInsertionPointAfter(marker);
  llvm::SmallPtrSet<Operation *, 16> readers;
  Value overflow = anyNonFinite(math, marker.getResults(), readers);
  std::optional<LossScaleUpdate> update;
  if (dynamic) {
    LossScaleOptions scaler;
    scaler.initialScale = initialScale;
    scaler.window = options.lossScaleWindow;
    scaler.minScale = options.minLossScale;
    scaler.hysteresis = options.hysteresis;
    scaler.consecutiveHysteresis = options.consecutiveHysteresis;
    LossScaleState state{scale, stateArg("loss_scale_hysteresis"), counter,
                         stateArg("last_overflow_step")};
    update = buildLossScaleUpdate(math, state, overflow, scaler);
  }
  if (options.scaling) {
    // DeepSpeed divides by the scale after its update (which doubles it on
    // the step that completes a window).
    Value inverse = math.div(math.f64(1), dynamic ? update->next.scale : scale);
    for (Value grad : marker.getResults()) {
      Value unscaled = math.mul(grad, math.cast(inverse, elementTypeOf(grad)));
      readers.insert(unscaled.getDefiningOp());
      grad.replaceUsesWithIf(unscaled, [&](OpOperand &use) {
        return !readers.contains(use.getOwner());
      });
    }
  }

  // A step that overflowed changes nothing but the counters and the scaler.
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  b.setInsertionPoint(ret);
  SmallVector<Value> results(ret.getOperands());
  for (auto [r, value] : llvm::enumerate(results)) {
    std::optional<unsigned> updated = getUpdatedArgument(step, r);
    // Buffers keep the forward pass's update, as DeepSpeed's skipped step
    // keeps BatchNorm's running statistics.
    if (updated && r != *counterResult && !isBuffer(step, *updated) &&
        value != entry.getArgument(*updated))
      value = math.select(overflow, entry.getArgument(*updated), value);
  }
  results[*counterResult] = math.add(counter, math.constant(i64, 1));
  // The reported gradient norm (sharc-optimizer's `grad_norm`) is the norm
  // of the gradients the step's loss had, as DeepSpeed reports it (ZeRO's
  // scaled norm / the scale the step used), and infinite on a skipped step.
  // The gradients it was computed from were divided by the updated scale
  // (see above), so it is multiplied back by updated / used: a power of two,
  // so exact.
  for (auto [r, value] : llvm::enumerate(results)) {
    auto name = step.getResultAttrOfType<StringAttr>(
        r, SharcDialect::getOutputAttrName());
    if (!name || name.getValue() != "grad_norm")
      continue;
    if (dynamic)
      value = math.mul(value, math.div(update->next.scale, scale));
    value = math.select(
        overflow, math.f64(std::numeric_limits<double>::infinity()), value);
  }

  SmallVector<Value> newState;
  if (dynamic)
    newState.append({update->next.scale, update->next.hysteresis,
                     update->next.lastOverflow});
  newState.push_back(
      math.add(skipped, math.select(overflow, math.constant(i64, 1),
                                    math.constant(i64, 0))));
  unsigned firstResult = *counterResult + 1;
  results.insert(results.begin() + firstResult, newState.begin(),
                 newState.end());
  SmallVector<std::pair<StringRef, Value>> outputs;
  if (options.scaling)
    outputs.push_back({"loss_scale", scale});
  outputs.push_back({"overflow", overflow});
  if (dynamic)
    outputs.push_back({"at_min_scale", update->atMinimum});
  for (auto [name, value] : outputs)
    results.push_back(value);

  SmallVector<unsigned> resultIndices(newState.size(), firstResult);
  SmallVector<Type> resultTypes;
  for (Value value : newState)
    resultTypes.push_back(value.getType());
  if (failed(step.insertResults(resultIndices, resultTypes, stateAttrs)))
    return failure();
  for (auto [name, value] : outputs) {
    unsigned index = step.getNumResults();
    SmallVector<unsigned> at{index};
    SmallVector<Type> type{value.getType()};
    SmallVector<DictionaryAttr> attrs{
        types.getDictionaryAttr(types.getNamedAttr(
            SharcDialect::getOutputAttrName(), types.getStringAttr(name)))};
    if (failed(step.insertResults(at, type, attrs)))
      return failure();
  }
  func::ReturnOp::create(b, results);
  ret.erase();
  return success();
}

std::optional<LossScalingOptions>
sharc::getLossScalingOptions(const TrainingOptions &training) {
  const PrecisionOptions &precision = training.mixedPrecision;
  LossScalingOptions options;
  switch (precision.precision) {
  case Precision::fp32:
    return std::nullopt;
  case Precision::bf16:
    if (!precision.bf16CheckOverflow)
      return std::nullopt;
    options.scaling = false;
    return options;
  case Precision::fp16:
    break;
  }
  const LossScaleOptions &scaler = precision.lossScale;
  options.lossScale = precision.staticLossScale;
  options.initialScalePower = std::ilogb(scaler.initialScale);
  options.lossScaleWindow = scaler.window;
  options.hysteresis = scaler.hysteresis;
  options.consecutiveHysteresis = scaler.consecutiveHysteresis;
  options.minLossScale = scaler.minScale;
  return options;
}

namespace {
struct LossScalingPass : sharc::impl::LossScalingBase<LossScalingPass> {
  using LossScalingBase::LossScalingBase;

  void runOnOperation() override {
    LossScalingOptions options;
    options.scaling = scaling;
    options.lossScale = lossScale;
    options.initialScalePower = initialScalePower;
    options.lossScaleWindow = lossScaleWindow;
    options.hysteresis = hysteresis;
    options.consecutiveHysteresis = consecutiveHysteresis;
    options.minLossScale = minLossScale;
    if (failed(applyLossScaling(getOperation(), options)))
      signalPassFailure();
  }
};
} // namespace
