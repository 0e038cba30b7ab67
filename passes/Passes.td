//===- Passes.td - sharc passes -------------------------------*- tablegen -*-===//
//
// Every sharc transformation, one pass each; docs/passes.md is the reference.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_TD
#define SHARC_PASSES_TD

include "mlir/Pass/PassBase.td"

def Autodiff : Pass<"sharc-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the forward function";
  let description = [{
    Adds `@<function>_grad`, which returns the loss and the gradient of
    `loss_seed * loss` with respect to every trainable parameter (see
    docs/training.md).
  }];
  let options = [
    Option<"function", "function", "std::string", "\"main\"",
           "Forward function to differentiate">,
    Option<"loss", "loss", "std::string", "\"\"",
           "Name (sharc.output) of the loss output; default: the only scalar "
           "float output">,
    Option<"freeze", "freeze", "std::string", "\"\"",
           "Regex: parameters whose name or ONNX name matches are not trained">,
  ];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def Optimizer : Pass<"sharc-optimizer", "mlir::ModuleOp"> {
  let summary = "Builds the training step: micro-batches, clipping, LR "
                "schedule, optimizer update";
  let description = [{
    Adds `@train_step` (see docs/training.md), which calls
    `@<function>_grad` once per micro-batch, sums the gradients, clips them
    by global norm, computes the learning rate of the step from the step
    counter and applies the optimizer update.  Semantics follow DeepSpeed;
    docs/optimizers.md gives every formula.  Option names are DeepSpeed's
    keys in kebab-case.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"main\"",
           "Forward function whose gradient function (@<function>_grad) "
           "the step calls">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "sgd, adam or adamw">,
    Option<"lr", "lr", "double", "1e-3", "Learning rate (without a schedule; "
           "WarmupCosineLR scales it)">,
    Option<"beta1", "beta1", "double", "0.9", "Adam: first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "Adam: second-moment decay">,
    Option<"eps", "eps", "double", "1e-8", "Adam: denominator epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "Weight decay (decoupled for AdamW, L2 for SGD and Adam with "
           "adam-w-mode=false)">,
    Option<"momentum", "momentum", "double", "0.0", "SGD: momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD: Nesterov momentum">,
    Option<"biasCorrection", "bias-correction", "bool", "true",
           "Adam: bias-correct the moments">,
    Option<"adamWMode", "adam-w-mode", "bool", "true",
           "Adam: decoupled weight decay (AdamW ignores this)">,
    Option<"gradAccum", "grad-accum", "int64_t", "1",
           "Micro-batches per step (gradient_accumulation_steps)">,
    Option<"clip", "clip", "double", "0.0",
           "Global-norm gradient clipping threshold; 0 disables">,
    Option<"scheduler", "scheduler", "std::string", "\"none\"",
           "none, warmup-lr, warmup-decay-lr, warmup-cosine-lr, one-cycle or "
           "lr-range-test">,
    Option<"warmupMinLr", "warmup-min-lr", "double", "0.0",
           "WarmupLR, WarmupDecayLR: initial learning rate">,
    Option<"warmupMaxLr", "warmup-max-lr", "double", "1e-3",
           "WarmupLR, WarmupDecayLR: learning rate after warmup">,
    Option<"warmupNumSteps", "warmup-num-steps", "int64_t", "1000",
           "Warmup steps (at least 2 are used)">,
    Option<"warmupType", "warmup-type", "std::string", "\"log\"",
           "Warmup curve: log or linear">,
    Option<"totalNumSteps", "total-num-steps", "int64_t", "0",
           "WarmupDecayLR, WarmupCosineLR: total training steps">,
    Option<"warmupMinRatio", "warmup-min-ratio", "double", "0.0",
           "WarmupCosineLR: initial fraction of lr">,
    Option<"cosMinRatio", "cos-min-ratio", "double", "1e-4",
           "WarmupCosineLR: final fraction of lr">,
    Option<"cycleMinLr", "cycle-min-lr", "double", "0.0",
           "OneCycle: lower learning rate">,
    Option<"cycleMaxLr", "cycle-max-lr", "double", "0.0",
           "OneCycle: upper learning rate">,
    Option<"decayLrRate", "decay-lr-rate", "double", "0.0",
           "OneCycle: post-cycle learning-rate decay rate">,
    Option<"cycleFirstStepSize", "cycle-first-step-size", "int64_t", "2000",
           "OneCycle: steps of the increasing half">,
    Option<"cycleSecondStepSize", "cycle-second-step-size", "int64_t", "-1",
           "OneCycle: steps of the decreasing half (-1: the first's)">,
    Option<"cycleFirstStairCount", "cycle-first-stair-count", "int64_t", "0",
           "OneCycle: accepted and, as in DeepSpeed, without effect">,
    Option<"cycleSecondStairCount", "cycle-second-stair-count", "int64_t",
           "-1", "OneCycle: accepted and, as in DeepSpeed, without effect">,
    Option<"decayStepSize", "decay-step-size", "int64_t", "0",
           "OneCycle: steps per post-cycle decay interval (0: no decay)">,
    Option<"cycleMomentum", "cycle-momentum", "bool", "true",
           "OneCycle with Adam: cycle beta1 inversely to the learning rate "
           "(and set beta2 to 0.99), as DeepSpeed does">,
    Option<"cycleMinMom", "cycle-min-mom", "double", "0.8",
           "OneCycle: lower momentum (beta1)">,
    Option<"cycleMaxMom", "cycle-max-mom", "double", "0.9",
           "OneCycle: upper momentum (beta1)">,
    Option<"decayMomRate", "decay-mom-rate", "double", "0.0",
           "OneCycle: post-cycle momentum decay rate">,
    Option<"lrRangeTestMinLr", "lr-range-test-min-lr", "double", "1e-3",
           "LRRangeTest: initial learning rate">,
    Option<"lrRangeTestStepRate", "lr-range-test-step-rate", "double", "1.0",
           "LRRangeTest: growth per interval">,
    Option<"lrRangeTestStepSize", "lr-range-test-step-size", "int64_t",
           "2000", "LRRangeTest: steps per interval">,
    Option<"lrRangeTestStaircase", "lr-range-test-staircase", "bool", "false",
           "LRRangeTest: grow in whole intervals">,
  ];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

#endif // SHARC_PASSES_TD
