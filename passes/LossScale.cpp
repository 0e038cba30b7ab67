//===- LossScale.cpp - DeepSpeed's dynamic loss scaler in the IR ----------===//
//
// The scaler's update as select-based sharc arithmetic (no control flow), so
// that a step that overflows and one that does not run the same ops.
//
//===----------------------------------------------------------------------===//

#include "passes/LossScale.h"

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
