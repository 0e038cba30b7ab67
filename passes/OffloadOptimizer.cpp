//===- OffloadOptimizer.cpp - sharc-offload-optimizer ---------------------===//
//
// ZeRO-Offload to NVMe as a rewrite of the step: each parameter's optimizer
// state (Adam's moments, SGD's momentum) lives in a file of its rank's between
// steps.  The update reads it through a swap-in (start, wait) placed before
// its first reader and writes the new value through a swap-out (start, wait)
// placed after the op that computes it; the parameters form sub-groups, as
// DeepSpeed's stage 3 forms them, so that the arena holds the state of a
// sub-group or two at a time, and the next sub-group's reads overlap the
// current one's update.  The same pass keeps the state in host memory with
// its update on the host (device=cpu), and at ZeRO stage 3 the parameter
// slices the gathers read in host memory or in files (param-device;
// docs/offload.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/SharcOps.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include "mlir/IR/IRMapping.h"

namespace sharc {
#define GEN_PASS_DEF_OFFLOADOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// One offloaded argument: its value before the step and the value the step
/// returns for it.
struct OffloadedState {
  BlockArgument arg;
  /// The return operand that is the argument's new value.
  unsigned result;
  Value newValue;
  /// The earliest op of the block that reads the argument (null if none).
  Operation *firstReader = nullptr;
};

/// The optimizer state of one parameter.
struct Unit {
  SmallVector<OffloadedState> states;
  /// Elements of one state tensor: this rank's slice of the parameter.
  int64_t elements = 0;
  /// Where the unit's update starts: its earliest reader, or the earliest
  /// op computing a new value when nothing reads the old one.
  Operation *anchor = nullptr;
};

/// True when `a` runs before `b` (ops of one block; null runs last).
bool runsBefore(Operation *a, Operation *b) {
  if (!a || !b)
    return a && !b;
  return a != b && a->isBeforeInBlock(b);
}

/// The ops of `block` where `arg` is read: the top-level op containing each
/// user, or, for an op computed inside its users' kernels, those users'.
FailureOr<SmallVector<Operation *>> readersOf(BlockArgument arg, Block &block) {
  SmallVector<Operation *> readers;
  for (Operation *user : arg.getUsers()) {
    Operation *top = block.findAncestorOpInBlock(*user);
    if (!top || isa<MicroBatchLoopOp>(top))
      return failure();
    if (isa<func::ReturnOp>(top))
      continue;
    if (top->hasAttr("sharc.fuse_into"))
      llvm::append_range(readers, readSites(top, block));
    else
      readers.push_back(top);
  }
  return readers;
}

/// The result of `func` whose attribute `name` is `attr` (the next value of
/// the argument that has it), if any.
std::optional<unsigned> resultWith(func::FuncOp func, StringRef name,
                                   Attribute attr) {
  for (unsigned r = 0, e = func.getNumResults(); r < e; ++r)
    if (func.getResultAttr(r, name) == attr)
      return r;
  return std::nullopt;
}

/// Runs on the host the ops that read `hostState`, values in host memory
/// (the state of ZeRO-Offload to the CPU, or what NVMe offload reads into
/// host memory), and makes them read and write host memory only.  Each
/// operand of those ops in device memory is copied to the host (its transfer
/// starts right after the op computing it, or before the first host op
/// reading it for an argument, and is waited for before that op); each of
/// their results that an op in device memory reads (or the step returns into
/// device memory) is copied back (started right after it, waited for before
/// its first such reader); an NVMe write of one of their results writes from
/// host memory.
LogicalResult runOnHost(func::FuncOp func, ArrayRef<Value> hostState,
                        ArrayRef<BlockArgument> residentParams = {}) {
  Block &block = func.getBody().front();
  MLIRContext *context = func.getContext();
  auto host = StorageAttr::get(context, Storage::host);
  auto device = StorageAttr::get(context, Storage::device);
  SetVector<Operation *> hostOps;
  OpBuilder builder(context);
  for (Value state : hostState)
    for (Operation *user : state.getUsers()) {
      Operation *top = block.findAncestorOpInBlock(*user);
      if (isa<func::ReturnOp, SwapOutStartOp>(top))
        continue;
      if (!isa<FusionOp>(top) || top->hasAttr("sharc.fuse_into") ||
          top->hasAttr("sharc.gemm_epilogue"))
        return top->emitError()
               << "sharc-offload-optimizer: reads optimizer state kept in "
                  "host memory but is not a kernel of its own that can run "
                  "on the host";
      hostOps.insert(top);
    }
  // A kernel that reads only what the host ops compute (the cast of a new
  // master to the 16-bit copy the step carries) runs on the host too: its
  // result crosses to the device instead of its operands.
  DenseSet<Value> inHost(hostState.begin(), hostState.end());
  inHost.insert(residentParams.begin(), residentParams.end());
  for (Operation &op : block) {
    if (!hostOps.contains(&op)) {
      auto fusion = dyn_cast<FusionOp>(op);
      if (!fusion || op.hasAttr("sharc.fuse_into") ||
          op.hasAttr("sharc.gemm_epilogue") || op.getNumOperands() == 0 ||
          !llvm::all_of(op.getOperands(),
                        [&](Value v) { return inHost.contains(v); }))
        continue;
      hostOps.insert(&op);
    }
    inHost.insert(op.result_begin(), op.result_end());
  }
  // In program order, so that a host op's operands from another host op
  // are known to be host values.
  SmallVector<Operation *> ordered(hostOps.begin(), hostOps.end());
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : ordered)
    op->setAttr("sharc.on_host", UnitAttr::get(context));
  // Parameters kept in host memory (offload_param): every reader on the
  // device (a gather's packing, wherever it stands, in the micro-batch loop
  // too) reads a copy made for it just before; a new value computed on the
  // device is copied to the host before the step returns it.
  for (BlockArgument param : residentParams) {
    std::optional<unsigned> ownResult;
    for (StringRef name :
         {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()})
      if (Attribute attr = func.getArgAttr(param.getArgNumber(), name))
        ownResult = resultWith(func, name, attr);
    for (OpOperand &use : llvm::make_early_inc_range(param.getUses())) {
      Operation *user = use.getOwner();
      if (user->hasAttr("sharc.on_host") ||
          (isa<func::ReturnOp>(user) && use.getOperandNumber() == ownResult))
        continue;
      builder.setInsertionPoint(user);
      auto start =
          TransferStartOp::create(builder, param.getLoc(), param, device);
      use.set(WaitOp::create(builder, param.getLoc(), start.getFuture()));
    }
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    std::optional<unsigned> result = ownResult;
    if (!result)
      continue;
    Value next = ret.getOperand(*result);
    if (next == param || hostOps.contains(next.getDefiningOp()))
      continue;
    if (Operation *def = next.getDefiningOp())
      builder.setInsertionPointAfter(def);
    else
      builder.setInsertionPoint(ret);
    auto start = TransferStartOp::create(builder, next.getLoc(), next, host);
    builder.setInsertionPoint(ret);
    ret.setOperand(*result,
                   WaitOp::create(builder, next.getLoc(), start.getFuture()));
  }
  DenseMap<Value, Value> onHost;
  for (Operation *op : ordered) {
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      if (isHostValue(value))
        continue;
      Value &copy = onHost[value];
      if (!copy) {
        Operation *def = value.getDefiningOp();
        if (def && def->getBlock() == &block)
          builder.setInsertionPointAfter(def);
        else
          builder.setInsertionPoint(op);
        auto start =
            TransferStartOp::create(builder, value.getLoc(), value, host);
        builder.setInsertionPoint(op);
        copy = WaitOp::create(builder, value.getLoc(), start.getFuture());
      }
      operand.set(copy);
    }
  }
  for (Operation *op : ordered)
    for (Value result : op->getResults()) {
      // Readers in device memory: ops not on the host, and the return of
      // anything but state kept in host memory.
      SmallVector<OpOperand *> deviceUses;
      for (OpOperand &use : result.getUses()) {
        Operation *user = use.getOwner();
        if (user->hasAttr("sharc.on_host"))
          continue;
        if (isa<SwapOutStartOp>(user)) {
          user->setAttr("sharc.on_host", UnitAttr::get(context));
          continue;
        }
        if (isa<func::ReturnOp>(user))
          if (std::optional<unsigned> updated =
                  getUpdatedArgument(func, use.getOperandNumber()))
            if (func.getArgAttr(*updated, SharcDialect::getStorageAttrName()) ==
                host)
              continue;
        deviceUses.push_back(&use);
      }
      if (deviceUses.empty())
        continue;
      Operation *first = nullptr;
      for (OpOperand *use : deviceUses) {
        Operation *top = block.findAncestorOpInBlock(*use->getOwner());
        if (!first || top->isBeforeInBlock(first))
          first = top;
      }
      builder.setInsertionPointAfter(op);
      auto start =
          TransferStartOp::create(builder, result.getLoc(), result, device);
      builder.setInsertionPoint(first);
      auto wait = WaitOp::create(builder, result.getLoc(), start.getFuture());
      for (OpOperand *use : deviceUses)
        use->set(wait.getResult());
    }
  return success();
}

/// True for a fusion that only casts its one operand to f16 or bf16.
bool isCastToSixteenBits(FusionOp fusion) {
  if (fusion->getNumOperands() != 1 || fusion->getNumResults() != 1)
    return false;
  Block &body = fusion.getBody().front();
  auto cast = dyn_cast<CastOp>(body.front());
  auto element = getElementTypeOrSelf(fusion->getResult(0).getType());
  return cast && std::next(body.begin()) == body.without_terminator().end() &&
         cast->getOperand(0) == body.getArgument(0) &&
         body.getTerminator()->getOperand(0) == cast.getResult() &&
         (element.isF16() || element.isBF16());
}

/// Mixed precision from ZeRO stage 1 on: each partitioned fp32 master weight
/// (an argument marked `sharc.param` and `sharc.slice`) that the step reads,
/// besides its update, only through casts to its 16-bit compute copy gets
/// that copy carried from step to step instead: a new argument and result,
/// `#sharc.state<"p", "compute_copy">` (this rank's slice, 16 bits), which
/// the casts' readers read and the cast of the new master (right after the
/// update computes it) becomes.  The copy is the cast of the master at every
/// step, so nothing changes but that the master is then read by its update
/// alone, and can be offloaded with the optimizer state.  The runtime derives
/// the copy's first value from the master (it is never saved).
LogicalResult carryComputeCopies(func::FuncOp func) {
  Block &block = func.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  MLIRContext *context = func.getContext();
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    BlockArgument master = block.getArgument(i);
    ParamAttr param = getParamAttr(func, i);
    SliceAttr slice = getSliceAttr(func, i);
    if (!param || !slice ||
        !cast<RankedTensorType>(master.getType()).getElementType().isF32())
      continue;
    SmallVector<FusionOp> casts;
    for (Operation *user : master.getUsers())
      if (auto fusion = dyn_cast<FusionOp>(user);
          fusion && isCastToSixteenBits(fusion))
        casts.push_back(fusion);
    if (casts.empty() || llvm::any_of(casts, [&](FusionOp c) {
          return c->getResult(0).getType() != casts[0]->getResult(0).getType();
        }))
      continue;
    std::optional<unsigned> result =
        resultWith(func, SharcDialect::getParamAttrName(), param);
    if (!result)
      continue;
    Value newMaster = ret.getOperand(*result);
    Operation *producer = newMaster.getDefiningOp();
    if (newMaster == master || !producer || producer->getBlock() != &block)
      continue;
    auto copyType = cast<RankedTensorType>(casts[0]->getResult(0).getType());
    auto copyState = StateAttr::get(context, param.getName(), "compute_copy");
    NamedAttrList attrs;
    attrs.set(SharcDialect::getStateAttrName(), copyState);
    attrs.set(SharcDialect::getSliceAttrName(),
              SliceAttr::get(context,
                             RankedTensorType::get(slice.getWhole().getShape(),
                                                   copyType.getElementType()),
                             slice.getRanks()));
    unsigned argIndex = func.getNumArguments();
    if (failed(func.insertArgument(
            argIndex, copyType, attrs.getDictionary(context), master.getLoc())))
      return failure();
    BlockArgument copy = block.getArgument(argIndex);
    // The new copy: the cast of the new master.
    OpBuilder builder(context);
    builder.setInsertionPointAfter(producer);
    IRMapping mapping;
    mapping.map(master, newMaster);
    Value newCopy = builder.clone(*casts[0], mapping)->getResult(0);
    for (FusionOp c : casts) {
      c->getResult(0).replaceAllUsesWith(copy);
      c->erase();
    }
    ret->insertOperands(ret->getNumOperands(), newCopy);
    if (failed(func.insertResult(
            func.getNumResults(), copyType,
            DictionaryAttr::get(
                context,
                {NamedAttribute(
                    StringAttr::get(context, SharcDialect::getStateAttrName()),
                    copyState)}))))
      return failure();
  }
  return success();
}

/// offload_param to NVMe: each of `params` (the slices the stage-3 gathers
/// read) lives in its file.  Every op reading it reads a swap-in of its own
/// (into host memory with `onHost`, where runOnHost has made its readers on
/// the device read a copy); the swap-in starts where the previous reader of
/// a swapped parameter in the same block stands, so that one read overlaps
/// the compute before it.  A new value is written to the file right after
/// the op computing it, and the step returns the write's wait.
LogicalResult swapParams(func::FuncOp func, ArrayRef<BlockArgument> params,
                         bool onHost) {
  Block &block = func.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  MLIRContext *context = func.getContext();
  OpBuilder builder(context);
  auto nvme = StorageAttr::get(context, Storage::nvme);
  // The readers, each with the parameter it reads.
  SmallVector<std::pair<Operation *, BlockArgument>> reads;
  DenseMap<BlockArgument, std::optional<unsigned>> ownResults;
  for (BlockArgument param : params) {
    std::optional<unsigned> &ownResult = ownResults[param];
    for (StringRef name :
         {SharcDialect::getParamAttrName(), SharcDialect::getStateAttrName()})
      if (Attribute attr = func.getArgAttr(param.getArgNumber(), name))
        ownResult = resultWith(func, name, attr);
    SetVector<Operation *> users;
    for (OpOperand &use : param.getUses())
      if (!isa<func::ReturnOp>(use.getOwner()) ||
          use.getOperandNumber() != ownResult)
        users.insert(use.getOwner());
    for (Operation *user : users)
      reads.push_back({user, param});
  }
  // In program order (the step's body, the micro-batch loop's inside it).
  DenseMap<Operation *, unsigned> order;
  func.walk<WalkOrder::PreOrder>(
      [&](Operation *op) { order.try_emplace(op, order.size()); });
  llvm::stable_sort(reads, [&](auto &a, auto &b) {
    return order.lookup(a.first) < order.lookup(b.first);
  });
  Operation *previous = nullptr;
  DenseMap<BlockArgument, SmallVector<Operation *>> readWaits;
  for (auto [user, param] : reads) {
    builder.setInsertionPoint(
        previous && previous->getBlock() == user->getBlock() ? previous : user);
    auto start = SwapInStartOp::create(builder, param.getLoc(), param);
    if (onHost)
      start->setAttr("sharc.on_host", UnitAttr::get(context));
    builder.setInsertionPoint(user);
    auto wait = WaitOp::create(builder, param.getLoc(), start.getFuture());
    readWaits[param].push_back(wait);
    std::optional<unsigned> ownResult = ownResults.lookup(param);
    param.replaceUsesWithIf(wait.getResult(), [&](OpOperand &use) {
      return use.getOwner() == user && !(isa<func::ReturnOp>(user) &&
                                         use.getOperandNumber() == ownResult);
    });
    previous = user;
  }
  for (BlockArgument param : params) {
    func.setArgAttr(param.getArgNumber(), SharcDialect::getStorageAttrName(),
                    nvme);
    std::optional<unsigned> result = ownResults.lookup(param);
    if (!result)
      continue;
    Value next = ret.getOperand(*result);
    if (next == param)
      continue;
    Operation *def = next.getDefiningOp();
    if (!def || def->getBlock() != &block)
      return func.emitError()
             << "sharc-offload-optimizer: the new value of argument #"
             << param.getArgNumber()
             << " (a parameter offloaded to NVMe) is not computed by an op "
                "of the step's body";
    // After the op computing it and after every read of the old value (the
    // swap-ins are waited for before their readers).
    Operation *after = def;
    for (Operation *wait : readWaits[param])
      if (Operation *top = block.findAncestorOpInBlock(*wait);
          after->isBeforeInBlock(top))
        after = top;
    builder.setInsertionPointAfter(after);
    auto start = SwapOutStartOp::create(builder, next.getLoc(), next, param);
    if (onHost)
      start->setAttr("sharc.on_host", UnitAttr::get(context));
    builder.setInsertionPoint(ret);
    ret.setOperand(*result,
                   WaitOp::create(builder, next.getLoc(), start.getFuture()));
  }
  return success();
}

} // namespace

LogicalResult
sharc::offloadOptimizerState(func::FuncOp func,
                             const OptimizerOffloadOptions &options) {
  if (func.getSymName() != "train_step" || func.isExternal())
    return success();
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "sharc-offload-optimizer: @train_step has "
           << func.getBody().getBlocks().size() << " blocks; it needs one";
  if (options.subGroupSize < 1)
    return func.emitError() << "sharc-offload-optimizer: sub-group-size must "
                               "be positive, got "
                            << options.subGroupSize;
  bool params = options.paramDevice != OffloadDevice::none;
  if (options.device == OffloadDevice::none && !params)
    return success();
  if (failed(carryComputeCopies(func)))
    return failure();
  Block &block = func.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  MLIRContext *context = func.getContext();
  auto nvme = StorageAttr::get(context, Storage::nvme);

  // The units, by parameter, in the order their updates run.
  llvm::MapVector<StringRef, Unit> units;
  for (BlockArgument arg : block.getArguments()) {
    unsigned index = arg.getArgNumber();
    auto state = func.getArgAttrOfType<StateAttr>(
        index, SharcDialect::getStateAttrName());
    // The 16-bit copies forward reads stay on the device.
    if (!state || state.getParam().empty() ||
        state.getRole() == "compute_copy" ||
        func.getArgAttr(index, SharcDialect::getStorageAttrName()))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    OffloadedState entry{arg, 0, Value()};
    std::optional<unsigned> result =
        resultWith(func, SharcDialect::getStateAttrName(), state);
    if (!result)
      return func.emitError()
             << "sharc-offload-optimizer: argument #" << index << " (" << state
             << ") has no result holding its new value";
    entry.result = *result;
    entry.newValue = ret.getOperand(*result);
    FailureOr<SmallVector<Operation *>> readers = readersOf(arg, block);
    if (failed(readers))
      return func.emitError()
             << "sharc-offload-optimizer: argument #" << index << " (" << state
             << ") is read inside the micro-batch loop; only state the "
                "update reads once per step can be offloaded";
    for (Operation *reader : *readers)
      if (!entry.firstReader || reader->isBeforeInBlock(entry.firstReader))
        entry.firstReader = reader;
    Operation *producer = nullptr;
    if (entry.newValue != arg) {
      producer = entry.newValue.getDefiningOp();
      if (!producer || producer->getBlock() != &block)
        return func.emitError()
               << "sharc-offload-optimizer: the new value of argument #"
               << index << " (" << state
               << ") is not computed by an op of the step's body";
    }
    Unit &unit = units[state.getParam()];
    unit.elements = std::max(unit.elements, type.getNumElements());
    for (Operation *op : {entry.firstReader, producer})
      if (op && (!unit.anchor || op->isBeforeInBlock(unit.anchor)))
        unit.anchor = op;
    unit.states.push_back(entry);
  }
  // The fp32 master slices that only their update reads (mixed precision:
  // their 16-bit copies are carried, above) go with their optimizer state.
  for (BlockArgument arg : block.getArguments()) {
    unsigned index = arg.getArgNumber();
    ParamAttr param = getParamAttr(func, index);
    if (!param || !getSliceAttr(func, index) ||
        func.getArgAttr(index, SharcDialect::getStorageAttrName()))
      continue;
    auto found = units.find(param.getName());
    if (found == units.end())
      continue;
    Unit &unit = found->second;
    SmallPtrSet<Operation *, 4> updates;
    for (OffloadedState &state : unit.states)
      for (Operation *user : state.arg.getUsers())
        updates.insert(block.findAncestorOpInBlock(*user));
    FailureOr<SmallVector<Operation *>> readers = readersOf(arg, block);
    if (failed(readers) || readers->empty() ||
        llvm::any_of(*readers,
                     [&](Operation *op) { return !updates.contains(op); }))
      continue;
    std::optional<unsigned> result =
        resultWith(func, SharcDialect::getParamAttrName(), param);
    if (!result)
      continue;
    OffloadedState entry{arg, *result, ret.getOperand(*result)};
    for (Operation *reader : *readers)
      if (!entry.firstReader || reader->isBeforeInBlock(entry.firstReader))
        entry.firstReader = reader;
    unit.states.push_back(entry);
  }
  // offload_param: the slices the gathers read (a carried 16-bit copy, or
  // an fp32 slice not offloaded with the optimizer state) stay in host
  // memory.
  SmallVector<BlockArgument> resident;
  if (params) {
    auto host = StorageAttr::get(context, Storage::host);
    llvm::StringSet<> carried;
    for (BlockArgument arg : block.getArguments())
      if (auto state = func.getArgAttrOfType<StateAttr>(
              arg.getArgNumber(), SharcDialect::getStateAttrName());
          state && state.getRole() == "compute_copy")
        carried.insert(state.getParam());
    for (BlockArgument arg : block.getArguments()) {
      unsigned index = arg.getArgNumber();
      if (!getSliceAttr(func, index) ||
          func.getArgAttr(index, SharcDialect::getStorageAttrName()))
        continue;
      auto state = func.getArgAttrOfType<StateAttr>(
          index, SharcDialect::getStateAttrName());
      ParamAttr param = getParamAttr(func, index);
      bool isCopy = state && state.getRole() == "compute_copy";
      bool isSlice =
          param && !carried.contains(param.getName()) &&
          llvm::none_of(units, [&](auto &entry) {
            return llvm::any_of(entry.second.states, [&](OffloadedState &s) {
              return s.arg == arg;
            });
          });
      if (!isCopy && !isSlice)
        continue;
      func.setArgAttr(index, SharcDialect::getStorageAttrName(), host);
      resident.push_back(arg);
    }
  }
  // Parameters offloaded to NVMe are kept in host memory first where the
  // files are read into host memory, then swapped.
  bool paramsOnHost =
      options.paramDevice == OffloadDevice::cpu ||
      (options.paramDevice == OffloadDevice::nvme && options.hostUpdate);
  if (!paramsOnHost)
    for (BlockArgument arg : resident)
      func.removeArgAttr(arg.getArgNumber(),
                         SharcDialect::getStorageAttrName());
  auto finish = [&](ArrayRef<Value> hostState) -> LogicalResult {
    if ((!hostState.empty() || (paramsOnHost && !resident.empty())) &&
        failed(runOnHost(func, hostState,
                         paramsOnHost ? ArrayRef(resident)
                                      : ArrayRef<BlockArgument>())))
      return failure();
    if (options.paramDevice != OffloadDevice::nvme)
      return success();
    return swapParams(func, resident, options.hostUpdate);
  };
  if (units.empty() || options.device == OffloadDevice::none)
    return finish({});
  SmallVector<Unit *> ordered;
  for (auto &[name, unit] : units)
    ordered.push_back(&unit);
  llvm::stable_sort(ordered, [](Unit *a, Unit *b) {
    return runsBefore(a->anchor, b->anchor);
  });
  if (options.device == OffloadDevice::cpu) {
    auto host = StorageAttr::get(context, Storage::host);
    SmallVector<Value> state;
    for (Unit *unit : ordered)
      for (OffloadedState &entry : unit->states) {
        func.setArgAttr(entry.arg.getArgNumber(),
                        SharcDialect::getStorageAttrName(), host);
        state.push_back(entry.arg);
      }
    return finish(state);
  }

  // Sub-groups: consecutive units, each group closed once it holds at least
  // subGroupSize elements (DeepSpeed 0.19.8's _create_fp16_sub_groups).
  SmallVector<SmallVector<Unit *>> groups(1);
  int64_t elements = 0;
  for (Unit *unit : ordered) {
    groups.back().push_back(unit);
    elements += unit->elements;
    if (elements >= options.subGroupSize && unit != ordered.back()) {
      groups.emplace_back();
      elements = 0;
    }
  }

  OpBuilder builder(context);
  // The reads of a group start where `readPoint` says (or just before the
  // group's first reader), its waits stand just before that reader; with
  // pipelineRead the next group's reads start right after them.
  Operation *readPoint = nullptr;
  // The waits of the previous group's writes, to be placed before this
  // group's first write (pipelineWrite).
  SmallVector<std::pair<SwapOutStartOp, unsigned>> pendingWrites;
  auto placeWrites = [&](Operation *before) {
    for (auto [start, result] : pendingWrites) {
      builder.setInsertionPoint(before ? before : start->getNextNode());
      if (before && before->isBeforeInBlock(start))
        builder.setInsertionPointAfter(start);
      auto wait = WaitOp::create(builder, start.getLoc(), start.getFuture());
      ret.setOperand(result, wait.getResult());
    }
    pendingWrites.clear();
  };
  for (SmallVector<Unit *> &group : groups) {
    // Reads.
    Operation *first = nullptr;
    for (Unit *unit : group)
      for (OffloadedState &state : unit->states)
        if (runsBefore(state.firstReader, first))
          first = state.firstReader;
    SmallVector<std::pair<SwapInStartOp, BlockArgument>> reads;
    if (first) {
      if (readPoint && !first->isBeforeInBlock(readPoint))
        builder.setInsertionPointAfter(readPoint);
      else
        builder.setInsertionPoint(first);
      for (Unit *unit : group)
        for (OffloadedState &state : unit->states)
          if (state.firstReader)
            reads.push_back(
                {SwapInStartOp::create(builder, state.arg.getLoc(), state.arg),
                 state.arg});
      builder.setInsertionPoint(first);
      Operation *lastWait = nullptr;
      for (auto [start, arg] : reads) {
        auto wait = WaitOp::create(builder, start.getLoc(), start.getFuture());
        arg.replaceUsesWithIf(wait.getResult(), [&](OpOperand &use) {
          return use.getOwner() != start.getOperation() &&
                 !isa<func::ReturnOp>(use.getOwner());
        });
        lastWait = wait;
      }
      readPoint = options.pipelineRead ? lastWait : nullptr;
    }
    // Writes: each new value right after the op computing it.
    SwapOutStartOp firstWrite;
    SmallVector<std::pair<SwapOutStartOp, unsigned>> writes;
    // After the producer, in the order of the arguments.
    DenseMap<Operation *, Operation *> lastWriteAfter;
    for (Unit *unit : group)
      for (OffloadedState &state : unit->states) {
        if (state.newValue == state.arg)
          continue;
        Operation *producer = state.newValue.getDefiningOp();
        builder.setInsertionPointAfter(
            lastWriteAfter.lookup_or(producer, producer));
        auto start = SwapOutStartOp::create(builder, state.newValue.getLoc(),
                                            state.newValue, state.arg);
        lastWriteAfter[producer] = start;
        writes.push_back({start, state.result});
        if (!firstWrite || start->isBeforeInBlock(firstWrite))
          firstWrite = start;
      }
    // One group's writes in flight: the previous group's are waited for
    // before this group's first write starts.
    placeWrites(firstWrite);
    pendingWrites = std::move(writes);
    if (!options.pipelineWrite)
      placeWrites(nullptr);
  }
  placeWrites(ret);
  for (auto &[name, unit] : units)
    for (OffloadedState &state : unit.states)
      func.setArgAttr(state.arg.getArgNumber(),
                      SharcDialect::getStorageAttrName(), nvme);
  if (!options.hostUpdate)
    return finish({});
  // The files are read into host memory, and the update runs there.
  SmallVector<Value> read;
  func.walk([&](SwapInStartOp start) {
    start->setAttr("sharc.on_host", UnitAttr::get(context));
    read.push_back((*start.getFuture().user_begin())->getResult(0));
  });
  return finish(read);
}

namespace {
struct OffloadOptimizerPass
    : sharc::impl::OffloadOptimizerBase<OffloadOptimizerPass> {
  using OffloadOptimizerBase::OffloadOptimizerBase;

  void runOnOperation() override {
    OptimizerOffloadOptions options;
    if (device == "cpu")
      options.device = OffloadDevice::cpu;
    else if (device == "nvme")
      options.device = OffloadDevice::nvme;
    else if (device != "none") {
      getOperation().emitError()
          << "sharc-offload-optimizer: device must be none, cpu or nvme, not '"
          << device << "'";
      return signalPassFailure();
    }
    options.subGroupSize = subGroupSize;
    options.hostUpdate = hostUpdate;
    if (paramDevice == "cpu")
      options.paramDevice = OffloadDevice::cpu;
    else if (paramDevice == "nvme")
      options.paramDevice = OffloadDevice::nvme;
    else if (paramDevice != "none") {
      getOperation().emitError() << "sharc-offload-optimizer: param-device "
                                    "must be none, cpu or nvme, not '"
                                 << paramDevice << "'";
      return signalPassFailure();
    }
    options.pipelineRead = pipelineRead;
    options.pipelineWrite = pipelineWrite;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(offloadOptimizerState(func, options)))
        return signalPassFailure();
  }
};
} // namespace
