//===- LossScale.h - DeepSpeed's dynamic loss scaler in the IR --*- C++ -*-===//
//
// Private to passes/ (and its tests): the state machine of DeepSpeed's
// DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py, release 0.19.8)
// built as sharc ops, so that one compiled training step updates the scale
// from the step's overflow flag (docs/semantics.md, "Dynamic loss scaling").
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_LOSSSCALE_H
#define SHARC_PASSES_LOSSSCALE_H

#include "passes/Schedule.h"

#include "ir/TrainingOptions.h"

namespace sharc {

/// The scaler's state: `scale` a `tensor<f64>` (DeepSpeed's cur_scale, a
/// Python float), the others `tensor<i64>` (cur_hysteresis, cur_iter,
/// last_overflow_iter).  The initial state is {initialScale, hysteresis, 0,
/// -1}.
struct LossScaleState {
  mlir::Value scale;
  mlir::Value hysteresis;
  mlir::Value iter;
  mlir::Value lastOverflow;
};

/// One step of the scaler: the state after a step whose gradients did
/// (`overflow`, a `tensor<i1>`, true) or did not overflow, and `atMinimum`
/// (`tensor<i1>`), true when the step overflowed with the scale already at
/// its minimum and due to halve: DeepSpeed then stops the run ("Current loss
/// scale already at minimum - cannot decrease scale anymore").
struct LossScaleUpdate {
  LossScaleState next;
  mlir::Value atMinimum;
};

/// Builds one update of DeepSpeed's DynamicLossScaler.update_scale:
/// - overflow: if hysteresis == 1 or cur_hysteresis == 1, the scale halves
///   (not below the minimum); otherwise cur_hysteresis drops by one; the
///   step becomes the last overflow;
/// - clean: with consecutive_hysteresis, cur_hysteresis refills; with
///   stable = cur_iter - last_overflow_iter - 1 > 0 a multiple of the
///   window, the scale doubles (and, without consecutive_hysteresis,
///   cur_hysteresis refills);
/// - cur_iter advances either way.
LossScaleUpdate buildLossScaleUpdate(MathBuilder &math,
                                     const LossScaleState &state,
                                     mlir::Value overflow,
                                     const LossScaleOptions &options);

} // namespace sharc

#endif // SHARC_PASSES_LOSSSCALE_H
