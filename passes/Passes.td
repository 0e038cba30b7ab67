//===- Passes.td - sharc passes -------------------------------*- tablegen -*-===//
//
// Every sharc transformation, one pass each; docs/passes.md is the reference.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_PASSES_TD
#define SHARC_PASSES_TD

include "mlir/Pass/PassBase.td"

def MixedPrecision : Pass<"sharc-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Makes the forward function compute in f16 or bf16 with fp32 "
                "master weights";
  let description = [{
    Runs before sharc-autodiff.  The f32 parameters stay f32 (the master
    weights the optimizer updates) and are cast to `dtype` where the body
    starts, as are the f32 data inputs; every op computes in `dtype`, except
    softmax, log_softmax, layer_norm, reduce, cross_entropy and nll_loss,
    which compute in f32 on operands cast up (docs/passes.md, "the fp32
    policy").  The results keep their declared types.  With `dtype=f32` the
    pass changes nothing.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"main\"",
           "Forward function to rewrite">,
    Option<"dtype", "dtype", "std::string", "\"f32\"",
           "Compute precision: f32, f16 or bf16">,
  ];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

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

def Rematerialize : Pass<"sharc-rematerialize", "mlir::ModuleOp"> {
  let summary = "Activation checkpointing: recompute chosen forward values "
                "in backward instead of keeping them";
  let description = [{
    On `@<function>_grad` (sharc-autodiff's result; run after CSE, which
    would merge the copies back): forward is the ops the loss depends on.
    An activation is a forward value of a floating-point type that depends
    on a data input (`sharc.input`); a cut is a forward value that is, after
    the op defining it, the only activation alive (a transformer's residual
    stream).  The cuts split forward into segments; the longest run of
    segments that repeats with a period (same ops, attributes and types) is
    the layers, each `period` segments long.  With `policy=layers`, for each
    layer, the forward values backward reads (but the layer's output, the
    next layer's input) are computed again by copies of the ops they need,
    placed just before the first backward op reading one of them, and
    backward reads the copies: only each layer's input stays alive from
    forward to backward.  The copies are the same ops in the same order, so
    the values are the same bits.  No repeated layer: a warning, nothing
    changes.  With `policy=auto`, any segment may be recomputed (the same
    way, on its own): the activation memory is the most bytes the
    function's values take at once, running its ops in order; the pass
    picks the segments whose recomputation costs the fewest FLOPs and brings
    it to at most `limit` bytes (Chen et al. 2016's model: each recomputed
    segment frees its kept values but holds them again while its backward
    runs; an exact covering knapsack over the segments, each choice checked
    by rewriting a copy of the function), or fails naming the shortfall.
    With `host=true` (DeepSpeed's cpu_checkpointing), each recomputed unit's
    input is copied to host memory (`sharc.transfer_start ... to <host>`)
    after its last forward reader and back before its first backward
    reader, which with the later ones reads the copy.
    See docs/recompute.md.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"main\"",
           "The forward function (the pass rewrites @<function>_grad)">,
    Option<"policy", "policy", "std::string", "\"layers\"",
           "none, layers (checkpoints at the repeated layers' inputs) or "
           "auto (the fewest recomputed FLOPs within `limit`)">,
    Option<"limit", "limit", "int64_t", "0",
           "policy=auto: the most bytes the gradient function's values may "
           "take at once (its activation memory)">,
    Option<"host", "host", "bool", "false",
           "Keep each recomputed unit's input (its checkpoint) in host "
           "memory between forward and backward (cpu_checkpointing)">,
  ];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def RegenerateMasks : Pass<"sharc-regenerate-masks", "mlir::ModuleOp"> {
  let summary = "Backward draws dropout's masks again instead of keeping "
                "forward's";
  let description = [{
    In every gradient function (whose last argument is the `loss_seed`
    input), each `sharc.dropout_mask` that backward reads (an op that depends
    on the loss seed) is cloned just before backward's first reader, which
    then read the clone.  The mask is a pure function of the random key
    arguments, so the clone draws the same bits; forward's mask then dies in
    forward instead of staying alive, one byte per element, until backward.
    Runs after CSE, which would merge the clones back.
  }];
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
  // The options are declared in C++ (WithOptimizerOptions in Passes.h), from
  // the list in TrainingOptions.def that the pipeline and the CLI share.
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def LossScaling : Pass<"sharc-loss-scale", "mlir::ModuleOp"> {
  let summary = "Loss scaling and skipped steps: DeepSpeed's fp16 loss scaler "
                "in @train_step";
  let description = [{
    Runs after sharc-optimizer and before sharc-data-parallel (or a ZeRO
    pass), on `@train_step`.  Every loss seed is multiplied by the loss
    scale; one check over the complete gradients (the `sharc.gradients` op)
    tells whether any element is infinite or NaN; the scale is updated as
    DeepSpeed 0.19.8's DynamicLossScaler updates it; the gradients are
    divided by the updated scale (as DeepSpeed divides them, after the
    update); and a step whose gradients overflowed is skipped: parameters and
    optimizer state keep their values, the learning-rate schedule and Adam's
    step count do not advance (they count applied steps: `step` minus the new
    `skipped_steps` state).  The scaler's state (`loss_scale`,
    `loss_scale_hysteresis`, `last_overflow_step`) is training state; the
    step returns the scale it used (`loss_scale`), whether it overflowed
    (`overflow`) and whether it overflowed with the scale already at its
    minimum (`at_min_scale`, where DeepSpeed stops).  `loss-scale` > 0 is a
    static scale (no scaler state); `scaling=false` only skips steps whose
    gradients are not finite (bf16's check_grad_overflow).  See
    docs/passes.md and docs/training.md.
  }];
  let options = [
    Option<"scaling", "scaling", "bool", "true",
           "Scale the loss (false: only skip non-finite steps)">,
    Option<"lossScale", "loss-scale", "double", "0.0",
           "Static loss scale; 0: dynamic (fp16.loss_scale)">,
    Option<"initialScalePower", "initial-scale-power", "int64_t", "16",
           "Dynamic: the first scale is 2^N (fp16.initial_scale_power)">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t", "1000",
           "Dynamic: clean steps before the scale doubles "
           "(fp16.loss_scale_window)">,
    Option<"hysteresis", "hysteresis", "int64_t", "2",
           "Dynamic: overflows tolerated before the scale halves "
           "(fp16.hysteresis)">,
    Option<"consecutiveHysteresis", "consecutive-hysteresis", "bool", "false",
           "Dynamic: a clean step refills the hysteresis "
           "(fp16.consecutive_hysteresis)">,
    Option<"minLossScale", "min-loss-scale", "double", "1.0",
           "Dynamic: the smallest scale (fp16.min_loss_scale)">,
  ];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def DataParallel : Pass<"sharc-data-parallel", "mlir::ModuleOp"> {
  let summary = "Makes @train_step data-parallel: loss seed, bucketed "
                "gradient all-reduces, the mean loss";
  let description = [{
    Runs after sharc-optimizer.  With `world-size` N > 1: every call of the
    gradient function gets the loss seed 1/(GAS N); the `sharc.gradients` op
    (the complete local gradients) becomes all-reduces in buckets of at most
    `reduce-bucket-size` elements (DeepSpeed's
    zero_optimization.reduce_bucket_size); the `loss` result is the mean of
    the ranks' losses.  With N = 1 the `sharc.gradients` op is removed.  See
    docs/training.md.
  }];
  // The options are declared in C++ (WithDataParallelOptions in Passes.h),
  // from the list in TrainingOptions.def.
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def Zero : Pass<"sharc-zero", "mlir::ModuleOp"> {
  let summary = "ZeRO stages 1 to 3: each rank keeps and updates the "
                "optimizer state of its slice of every parameter";
  let description = [{
    Runs after sharc-optimizer (and sharc-loss-scale), before
    sharc-data-parallel, when `zero-stage` is 1, 2 or 3 and `world-size`
    N > 1.
    Each trainable parameter of n elements is viewed as [N, ceil(n / N)]
    (zero padding at the end); rank r owns row r.  The `sharc.gradients`
    hand-off becomes reduce-scatters in buckets of at most
    `reduce-bucket-size` elements; the update is rebuilt on this rank's
    slices (full sums of a gradient, such as the clipping norm, become the
    slice's sum and an all-reduce); the optimizer state arguments and
    results hold the slices only; the updated slices are all-gathered into
    the full parameters.  At stage 2 the reduce-scatter buckets follow the
    reverse order of the parameters (the order backward completes them),
    and sharc-schedule-collectives moves each into backward; with gradient
    accumulation each micro-batch's gradients are reduce-scattered in the
    micro-batch loop, which carries and sums this rank's slices.  Stage 3 also partitions every
    parameter of more than `param-persistence-threshold` elements: its
    argument becomes this rank's slice (marked `sharc.slice`), all-gathered
    where the step starts for forward and backward (placed by
    sharc-gather-parameters), and its result the updated slice.  See
    docs/zero.md.
  }];
  // The options are those of sharc-data-parallel (WithDataParallelOptions in
  // Passes.h, from TrainingOptions.def).
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def PlanMemory : Pass<"sharc-plan-memory", "mlir::ModuleOp"> {
  let summary = "Plans the intermediate tensors of each function into one "
                "static arena";
  let description = [{
    For every function (a single block), each tensor result of an op other
    than `sharc.constant` gets a byte offset in one arena, planned greedily
    by size (largest first, each at the lowest aligned offset that does not
    overlap a value whose live range intersects).  Ops get
    `sharc.offsets = array<i64: ...>` (one per result, -1 when not placed)
    and functions `sharc.arena_bytes` (docs/passes.md).
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "256",
           "Byte alignment of every offset and size">,
  ];
}

def IndexMasks : Pass<"sharc-index-masks", "mlir::ModuleOp"> {
  let summary = "Computes constant triangular masks from element indices "
                "where they are read";
  let description = [{
    A non-splat constant of rank >= 2 (i1 or float) whose elements over its
    last two dimensions (row r, column c) are `c - r >= k ? x : y` for one
    diagonal k and two values x, y, the same for every index of the leading
    dimensions (attention's causal mask), is replaced at each use by that
    predicate: `sharc.compare` of `sub(iota(c), iota(r))` with k (`ge`),
    then `sharc.select` of x and y for a float mask.  The predicate is built
    at the iteration shape of an elementwise reader, so that sharc-fuse puts
    it in the reader's fusion (the iotas cloned in like splat constants) and
    the kernel computes it from each element's position; any other reader
    gets it at the constant's shape.  The constant goes when no use is left.
    Runs before sharc-fuse, in the compile pipeline only.
  }];
  let dependentDialects = ["sharc::SharcDialect"];
}

def Fuse : Pass<"sharc-fuse", "mlir::ModuleOp"> {
  let summary = "Groups chains of elementwise ops into sharc.fusion ops";
  let description = [{
    In every function (a single block), elementwise ops (the ops that a
    `sharc.fusion` body may hold) are grouped, in reverse program order: an
    op joins the group of one of its users when its result has the group's
    iteration shape and joining creates no cycle between groups.  Splat
    constants and iotas are cloned into each fusion that reads them; every other value
    from outside becomes an operand, and every group value used outside
    becomes a result.  Each group becomes one `sharc.fusion`
    (docs/passes.md).
  }];
  let options = [
    Option<"singletons", "singletons", "bool", "true",
           "Wrap an elementwise op that joins no group in a fusion of its "
           "own, so that all elementwise work is in sharc.fusion ops">,
    Option<"rowPrologues", "row-prologues", "bool", "true",
           "Mark a short single-result fusion read only by a softmax, "
           "log_softmax, layer_norm or float reduce with sharc.fuse_into: "
           "the code generator computes it inside that row kernel">,
    Option<"gemmFusion", "gemm-fusion", "bool", "true",
           "Let GEMMs absorb their neighbours.  Epilogues: a fusion (or plain "
           "op) computing act(matmul + bias), matmul + bias or act(matmul), "
           "act a relu or tanh gelu, bias a vector over the last dimension, "
           "the matmul used only there, that yields nothing else but perhaps "
           "the pre-activation, gets a #sharc.gemm_epilogue (product and bias "
           "operands, GEMM and pre-activation results, activation), the "
           "matmul sharc.fuse_into: the GEMM runs "
           "there and applies bias and activation.  Views: a transpose (rank >= 3) read only by matmuls "
           "with a unit-stride matrix dimension gets sharc.fuse_into (read in "
           "place with strides); a transpose that is the only user of a "
           "matmul and keeps its columns contiguous gets sharc.gemm_output, "
           "the matmul sharc.fuse_into (the GEMM writes the transpose)">,
  ];
  let dependentDialects = ["sharc::SharcDialect"];
}

def PrepareEmission : Pass<"sharc-prepare-emission", "mlir::ModuleOp"> {
  let summary = "Shapes @train_step into the one function the code generator "
                "emits";
  let description = [{
    Inlines every `func.call` into `@train_step` (so one memory plan covers
    the whole step) and erases the other functions; turns a splat constant
    that feeds an op other than an elementwise one into a `sharc.broadcast`
    of a one-element constant (docs/codegen.md).
  }];
  let dependentDialects = ["sharc::SharcDialect", "mlir::func::FuncDialect"];
}

def GatherParameters : Pass<"sharc-gather-parameters", "mlir::ModuleOp"> {
  let summary = "ZeRO stage 3: places each parameter's all-gather before "
                "its readers, and gathers again where a reuse is far";
  let description = [{
    In a function at ZeRO stage 3 (`sharc.zero_stage`), after
    sharc-prepare-emission: every all-gather of a partitioned parameter's
    slice (an argument marked `sharc.slice`) is rebuilt in the type of its
    readers when they all cast it (the 16-bit compute copy is gathered in
    16 bits) and moves, with its packing and unpacking, to just before its
    first reader.  The readers are split where the readers between two of
    them read more than `max-reuse-distance` elements of other gathered
    parameters; each later group gets its own all-gather before its first
    reader, so that the whole parameter is freed between the groups
    (forward and backward gather it once each).  See docs/zero.md.
  }];
  let options = [
    Option<"maxReuseDistance", "max-reuse-distance", "int64_t", "1000000000",
           "Keep a gathered parameter for a reader within this many "
           "elements of other gathered parameters (DeepSpeed's "
           "stage3_max_reuse_distance)">,
  ];
  let dependentDialects = ["sharc::SharcDialect"];
}

def ScheduleCollectives : Pass<"sharc-schedule-collectives",
                               "mlir::ModuleOp"> {
  let summary = "Splits collectives into start/wait pairs and schedules "
                "them to overlap computation";
  let description = [{
    Every `sharc.all_reduce` becomes a `sharc.all_reduce_start`, whose
    `!sharc.future` a `sharc.wait` turns into the result.  With `overlap`
    (the default), each start moves up, with the reshapes and concats that
    pack its bucket, to just after the ops that produce what it reads, and
    each wait moves down to just before the first op that reads its result
    (or the micro-batch loop whose body does), so that the ops in between
    overlap the communication.
    Without it, each wait follows its start.  In a function at ZeRO stage
    2 (`sharc.zero_stage`) each `sharc.reduce_scatter` becomes a
    `sharc.reduce_scatter_start` and a `sharc.wait`; with or without
    `overlap` the start moves up with its packing to just after the ops
    that produce its bucket, so that the bucket's full gradients die in
    backward; the wait is placed as an all-reduce's.  With `overlap` the
    ZeRO parameter gathers (`sharc.parameter_gather`) become
    `sharc.all_gather_start` and `sharc.wait` where they stand, and after
    each wait the gathers that follow in its block start (prefetch), in
    order, while they add fewer elements than the smaller of
    `prefetch-bucket-size` and `max-live-parameters` less the elements
    gathered and not yet released there (DeepSpeed's stage-3 prefetch;
    below stage 3 every gather is prefetched).  Runs after sharc-fuse, on
    the kernels the code generator emits (docs/passes.md).
  }];
  let options = [
    Option<"overlap", "overlap", "bool", "true",
           "Start each collective as early and wait as late as the data "
           "allows (false: wait right after the start)">,
    Option<"prefetchBucketSize", "prefetch-bucket-size", "int64_t",
           "50000000",
           "ZeRO stage 3: after each parameter gather's wait, start the "
           "gathers that follow while they add fewer than this many "
           "elements (0: no prefetch; DeepSpeed's "
           "stage3_prefetch_bucket_size)">,
    Option<"maxLiveParameters", "max-live-parameters", "int64_t",
           "1000000000",
           "ZeRO stage 3: prefetch only while fewer than this many elements "
           "of gathered parameters are live (DeepSpeed's "
           "stage3_max_live_parameters)">,
  ];
  let dependentDialects = ["sharc::SharcDialect"];
}

def OffloadOptimizer : Pass<"sharc-offload-optimizer", "mlir::ModuleOp"> {
  let summary = "ZeRO-Offload: keeps each parameter's optimizer state in a "
                "file streamed through the update in sub-groups (nvme), or "
                "in host memory with its update run on the host (cpu)";
  let description = [{
    On `@train_step`, after sharc-schedule-collectives: every argument that
    is a parameter's optimizer state (`#sharc.state<"param", role>` with a
    parameter name: `exp_avg`, `exp_avg_sq`, `momentum_buffer`) gets
    `sharc.storage = #sharc.storage<nvme>`.  Its readers (the optimizer
    update) read it through a `sharc.swap_in_start` and `sharc.wait` placed
    before them, and its new value is written through a
    `sharc.swap_out_start` right after the op that computes it and a
    `sharc.wait` whose result the step returns.  The parameters, in the order
    their updates run, form sub-groups as DeepSpeed's stage 3 forms them:
    each closes once its state holds at least `sub-group-size` elements of
    one state tensor.  With `pipeline-read` the next sub-group's reads start
    right after the current one's waits (they overlap its update); with
    `pipeline-write` each sub-group's writes are waited for just before the
    next sub-group's first write (else right after they start).  An
    argument read inside the micro-batch loop is an error.  With
    `device=cpu` the state gets `#sharc.storage<host>` instead, the ops that
    read it (the update's fusions) run on the host (`sharc.on_host`), their
    operands in device memory are copied to the host
    (`sharc.transfer_start`) and their results read in device memory copied
    back.  With `param-device` (ZeRO stage 3's offload_param) the slices
    the parameter gathers read (the fp32 slice, or the carried 16-bit copy
    under mixed precision) go to host memory (`cpu`: each reader on the
    device reads a copy made just before it) or to files (`nvme`: each
    reader reads a swap-in of its own, started where the previous such
    reader stands; the new value is swapped out after the op computing it).
    See docs/offload.md.
  }];
  let options = [
    Option<"device", "device", "std::string", "\"nvme\"",
           "Where the state goes: nvme, cpu (host memory; the ops that "
           "read it run on the host, with their operands copied to the host "
           "and their results read in device memory copied back), or none">,
    Option<"subGroupSize", "sub-group-size", "int64_t", "1000000000",
           "Close a sub-group once it holds this many elements of one state "
           "tensor (DeepSpeed's zero_optimization.sub_group_size)">,
    Option<"hostUpdate", "host-update", "bool", "false",
           "nvme: read the files into host memory (and run the update on "
           "the host; the CUDA target's layout; device=cpu always does)">,
    Option<"paramDevice", "param-device", "std::string", "\"none\"",
           "ZeRO stage 3's offload_param: none, cpu (the slices the "
           "gathers read kept in host memory and copied to the device for "
           "each gather) or nvme (kept in files, each gather reading a "
           "swap-in started one reader ahead)">,
    Option<"pipelineRead", "pipeline-read", "bool", "true",
           "Read the next sub-group while the current one is updated "
           "(offload_optimizer.pipeline_read)">,
    Option<"pipelineWrite", "pipeline-write", "bool", "true",
           "Write each sub-group back while the next is updated "
           "(offload_optimizer.pipeline_write)">,
  ];
  let dependentDialects = ["sharc::SharcDialect"];
}

def UpdateInPlace : Pass<"sharc-update-in-place", "mlir::ModuleOp"> {
  let summary = "Lets optimizer updates write parameters and state in place";
  let description = [{
    A `sharc.fusion` result that is the new value of a `@train_step`
    parameter or optimizer-state argument gets that argument's memory:
    `sharc.result_buffers = array<i64: ...>` holds, per result, the argument
    number or -1.  Only when the result is only returned, the fusion reads the
    old value with the same shape, and nothing after the fusion (counting a
    fused producer at its user) reads the old value.  The copies that give
    ZeRO's new parameters (an all-gather, or the slice cutting a parameter
    out of a gathered bucket, through reshapes) write the parameter's memory
    likewise, once nothing at or after them reads the old value.
  }];
  let dependentDialects = ["sharc::SharcDialect"];
}

#endif // SHARC_PASSES_TD
