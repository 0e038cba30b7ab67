//===- Emitter.cpp - Training step to C++/CUDA source ---------------------===//
//
// Walks the prepared, fused and memory-planned `@train_step` in order and
// writes one statement per op into `sharcProgramStep`: a kernel launch, a
// GEMM, a copy or a collective.  Kernels are functors with every shape baked
// in; their text is deduplicated, so a layer repeated with the same shapes
// compiles to one kernel.  Model names only ever appear inside escaped string
// literals (cppStringLiteral).  The op families are emitted by
// EmitElementwise.cpp (fusions, data movement), EmitLinalg.cpp (GEMMs,
// reductions, normalization, losses) and EmitNN.cpp (convolution, pooling);
// this file holds the walk, buffers, launches, collectives, micro-batch
// loops and the translation unit.
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterInternal.h"

#include "ir/SharcOps.h"
#include "runtime/Npy.h"
#include "runtime/Program.h"
#include "runtime/Random.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace sharc;
using namespace sharc::codegen;

//===----------------------------------------------------------------------===//
// Text helpers
//===----------------------------------------------------------------------===//

std::string sharc::cppStringLiteral(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c == '?') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      // Always three octal digits: an octal escape takes at most three, so
      // the next character can never extend it.
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\%03o", static_cast<unsigned>(c));
      out += escape;
    }
  }
  return out + "\"";
}

namespace sharc::codegen {

int ProgramEmitter::errorCode(std::string message) {
  messages.push_back(std::move(message));
  return static_cast<int>(messages.size());
}

void ProgramEmitter::launch(const KernelText &kernel, int64_t count) {
  std::string text = " {\n";
  for (const std::string &member : kernel.members)
    text += "  " + member + ";\n";
  for (const std::string &helper : kernel.helpers)
    text += helper;
  text += "  SHARC_HD void operator()(int64_t i) const {\n" + kernel.body +
          "  }\n};\n";
  auto [it, inserted] =
      kernelNames.try_emplace(text, "K" + str(kernelNames.size()));
  if (inserted)
    kernelDefinitions += "struct " + it->second + text + "\n";
  // A kernel of an op run on the host (ZeRO-Offload to the CPU): by the
  // host's threads, on host memory, never grouped with device launches.
  if (hostLaunch) {
    body() += "  sharc::kern::launchHost(ctx, " + str(count) + ", " +
              str(kernel.work) + ", " + it->second + "{" +
              llvm::join(kernel.arguments, ", ") + "});\n";
    report.numKernelLaunches += repeat;
    ++computeCalls;
    return;
  }
  // Join the pending run when this is the same kernel, it writes only
  // persistent buffers (distinct allocations, never arena memory that the
  // plan may share with what the run reads), and it touches nothing the run
  // writes, nor writes anything the run reads: then the launches may run as
  // one (the optimizer update of every parameter).
  bool groupable = true, independent = true;
  for (auto [member, argument] : llvm::zip(kernel.members, kernel.arguments)) {
    bool reads = StringRef(member).starts_with("const ");
    if (!reads && !StringRef(argument).contains("ctx->buffers["))
      groupable = false;
    if (pending.writes.contains(argument) ||
        (!reads && pending.reads.contains(argument)))
      independent = false;
  }
  // A CUDA kernel's parameters (the group) stay well under 32 KiB.
  bool full = pending.launches.size() >= 64 ||
              (pending.launches.size() + 1) * kernel.members.size() * 8 > 16384;
  if (!groupable || full || pending.kernel != it->second ||
      pending.work != kernel.work || !independent)
    flushLaunches();
  pending.kernel = it->second;
  pending.work = kernel.work;
  pending.launches.emplace_back(llvm::join(kernel.arguments, ", "), count);
  for (auto [member, argument] : llvm::zip(kernel.members, kernel.arguments))
    (StringRef(member).starts_with("const ") ? pending.reads : pending.writes)
        .insert(argument);
  if (!groupable)
    flushLaunches();
}

void ProgramEmitter::flushLaunches() {
  if (pending.launches.empty())
    return;
  const std::string &name = pending.kernel;
  if (pending.launches.size() == 1) {
    auto &[arguments, count] = pending.launches.front();
    stepBody += "  sharc::kern::launch(ctx, " + str(count) + ", " +
                str(pending.work) + ", " + name + "{" + arguments + "});\n";
  } else {
    size_t n = pending.launches.size();
    stepBody += "  {\n    const sharc::kern::Group<" + name + ", " + str(n) +
                "> group{{\n";
    for (auto &[arguments, count] : pending.launches)
      stepBody += "        " + name + "{" + arguments + "},\n";
    stepBody += "    }, {";
    for (auto [i, launch] : llvm::enumerate(pending.launches))
      stepBody += (i ? ", " : "") + str(launch.second);
    stepBody += "}};\n    sharc::kern::launchGroup(ctx, " + str(pending.work) +
                ", group);\n  }\n";
  }
  report.numKernelLaunches += repeat;
  ++computeCalls;
  pending = PendingLaunches();
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::collectBuffers() {
  Block &entry = step.getBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    unsigned i = arg.getArgNumber();
    Buffer buffer;
    buffer.element = elementOf(arg);
    buffer.shape.assign(tensorType(arg).getShape().begin(),
                        tensorType(arg).getShape().end());
    if (ParamAttr param = getParamAttr(step, i)) {
      buffer.name = param.getName().str();
      buffer.source = param.getSource().str();
      buffer.role = "param";
    } else if (auto state = step.getArgAttrOfType<StateAttr>(
                   i, SharcDialect::getStateAttrName())) {
      buffer.role = "state";
      buffer.initialValue = state.getInitValue();
      buffer.name = state.getParam().empty()
                        ? state.getRole().str()
                        : (state.getParam() + "." + state.getRole()).str();
      buffer.stateOf = state.getParam().str();
      if (state.getParam().empty() && state.getRole() == "step")
        stepBuffer = static_cast<int>(buffers.size());
      if (state.getRole() == "compute_copy")
        buffer.derivedFromName = state.getParam().str();
    } else if (auto input = step.getArgAttrOfType<StringAttr>(
                   i, SharcDialect::getInputAttrName())) {
      buffer.role = "input";
      buffer.name = input.getValue().str();
    } else {
      return step.emitError() << "code generation: argument " << i
                              << " of @train_step has no sharc.param, "
                                 "sharc.state or sharc.input attribute";
    }
    if (storageType(buffer.element).empty())
      return step.emitError()
             << "code generation: argument '" << buffer.name << "' has type "
             << arg.getType() << "; f16/bf16 programs are not supported yet";
    if (auto storage = step.getArgAttrOfType<StorageAttr>(
            i, SharcDialect::getStorageAttrName())) {
      buffer.offloaded = storage.getValue() == Storage::nvme;
      buffer.inHost = storage.getValue() == Storage::host;
    }
    // A ZeRO slice (sharc-zero): its file holds the whole tensor.
    buffer.fileShape = buffer.shape;
    if (SliceAttr slice = getSliceAttr(step, i)) {
      buffer.sliced = true;
      buffer.fileShape.assign(slice.getWhole().getShape().begin(),
                              slice.getWhole().getShape().end());
    }
    bufferOf[arg] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
  }
  // Derived state: the parameter it comes from.
  for (Buffer &buffer : buffers) {
    if (buffer.derivedFromName.empty())
      continue;
    for (auto [i, other] : llvm::enumerate(buffers))
      if (other.role == "param" && other.name == buffer.derivedFromName)
        buffer.derivedFrom = static_cast<int>(i);
    if (buffer.derivedFrom < 0)
      return step.emitError()
             << "code generation: '" << buffer.name
             << "' is derived from parameter '" << buffer.derivedFromName
             << "', which the step does not have";
  }
  // Trainable parameters: those whose new value is not the argument itself.
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  for (auto [r, value] : llvm::enumerate(ret.getOperands())) {
    auto param = step.getResultAttrOfType<ParamAttr>(
        r, SharcDialect::getParamAttrName());
    if (!param || isa<BlockArgument>(value))
      continue;
    for (Buffer &buffer : buffers)
      if (buffer.role == "param" && buffer.name == param.getName())
        buffer.trainable = true;
  }
  // Outputs.
  for (unsigned r = 0, e = step.getNumResults(); r < e; ++r) {
    auto name = step.getResultAttrOfType<StringAttr>(
        r, SharcDialect::getOutputAttrName());
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(step.getResultTypes()[r]);
    Buffer buffer;
    buffer.role = "output";
    buffer.name = name.getValue().str();
    buffer.element = type.getElementType();
    buffer.shape.assign(type.getShape().begin(), type.getShape().end());
    if (buffer.name == "loss")
      lossBuffer = static_cast<int>(buffers.size());
    else if (buffer.name == "lr")
      lrBuffer = static_cast<int>(buffers.size());
    outputBuffers[buffer.name] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
  }
  if (lossBuffer < 0 || lrBuffer < 0 || stepBuffer < 0)
    return step.emitError() << "code generation: @train_step needs 'loss' "
                               "and 'lr' outputs and a step counter";
  if (buffers[lossBuffer].shape.size() != 0 ||
      !isFloatType(buffers[lossBuffer].element))
    return step.emitError() << "code generation: the loss must be a float "
                               "scalar";
  return success();
}

FailureOr<std::string> ProgramEmitter::pointerTo(Value value) {
  // A reshape is a view of its operand, a wait's result the buffer its
  // collective wrote (sharc-plan-memory aliases them).
  for (Operation *def = value.getDefiningOp();
       isa_and_nonnull<ReshapeOp, WaitOp>(def); def = value.getDefiningOp())
    value = def->getOperand(0);
  auto known = bufferOf.find(value);
  if (known != bufferOf.end()) {
    if (buffers[known->second].offloaded)
      return emitError(value.getLoc())
             << "code generation: '" << buffers[known->second].name
             << "' is offloaded to NVMe and has no device memory";
    return "ctx->buffers[" + str(known->second) + "]";
  }
  auto argument = argumentPointers.find(value);
  if (argument != argumentPointers.end())
    return argument->second;
  Operation *op = value.getDefiningOp();
  if (auto constant = dyn_cast_or_null<ConstantOp>(op)) {
    auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
    Type element = elementOf(value);
    if (!attr || storageType(element).empty())
      return constant.emitError()
             << "code generation: unsupported constant of type "
             << value.getType();
    std::string data;
    auto type = tensorType(value);
    int64_t n = type.getNumElements();
    if (isFloatType(element)) {
      for (int64_t k = 0; k < n; ++k) {
        APFloat v = attr.isSplat() ? attr.getSplatValue<APFloat>()
                                   : attr.getValues<APFloat>()[k];
        // An f32 value as a float literal (a double one would be a
        // narrowing conversion when infinite or NaN).  A 16-bit value is
        // exact in double; its storage type rounds it (to itself).
        std::string literal = element.isF32()
                                  ? floatLiteral(v.convertToDouble())
                                  : doubleLiteral(v.convertToDouble());
        if (element.isF16() || element.isBF16())
          literal = storageType(element) + "(" + literal + ")";
        data += (k ? ", " : "") + literal;
      }
    } else if (element.isInteger(1)) {
      for (int64_t k = 0; k < n; ++k) {
        bool v = attr.isSplat() ? attr.getSplatValue<bool>()
                                : attr.getValues<bool>()[k];
        data += std::string(k ? ", " : "") + (v ? "true" : "false");
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        APInt v = attr.isSplat() ? attr.getSplatValue<APInt>()
                                 : attr.getValues<APInt>()[k];
        data += (k ? ", " : "") + intLiteral(v.getSExtValue());
      }
    }
    Buffer buffer;
    buffer.role = "constant";
    buffer.name = "const" + str(buffers.size());
    buffer.element = element;
    buffer.shape.assign(type.getShape().begin(), type.getShape().end());
    buffer.constantData = std::move(data);
    bufferOf[value] = static_cast<int>(buffers.size());
    buffers.push_back(std::move(buffer));
    return "ctx->buffers[" + str(bufferOf[value]) + "]";
  }
  if (!op)
    return failure();
  unsigned index = cast<OpResult>(value).getResultNumber();
  if (auto external =
          op->getAttrOfType<DenseI64ArrayAttr>("sharc.result_buffers"))
    if (index < external.size() && external[index] >= 0)
      return "ctx->buffers[" +
             str(bufferOf.lookup(step.getArgument(external[index]))) + "]";
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("sharc.offsets");
  if (!offsets || offsets.size() <= index || offsets[index] < 0)
    return op->emitError() << "code generation: result " << index
                           << " has no arena offset (run sharc-plan-memory)";
  // Values in host memory (ZeRO-Offload to the CPU) are in the host arena.
  auto transfer = dyn_cast<TransferStartOp>(op);
  bool host = op->hasAttr("sharc.on_host") ||
              (transfer && transfer.getTo() == Storage::host);
  return std::string(host ? "(ctx->hostArena + " : "(ctx->arena + ") +
         str(offsets[index]) + ")";
}

FailureOr<std::string> ProgramEmitter::typedPointer(Value value) {
  FailureOr<std::string> pointer = pointerTo(value);
  if (failed(pointer))
    return failure();
  std::string type = storageType(elementOf(value));
  if (type.empty())
    return emitError(value.getLoc())
           << "code generation: element type " << elementOf(value)
           << " is not supported yet";
  return "reinterpret_cast<" + type + " *>(" + *pointer + ")";
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitAllReduceStart(AllReduceStartOp op) {
  if (static_cast<int>(op.getRanks()) != options.worldSize)
    return op.emitError() << "code generation: all_reduce_start over "
                          << op.getRanks() << " ranks in a program compiled "
                          << "for " << options.worldSize;
  // The collective reduces the future's buffer in place: the operand is
  // copied there, then handed to the communicator, whose ticket the wait
  // names.
  if (failed(emitCopy(op.getOperand(), op.getFuture())))
    return failure();
  FailureOr<std::string> pointer = pointerTo(op.getFuture());
  if (failed(pointer))
    return failure();
  Type element = elementOf(op.getOperand());
  int64_t count = tensorType(op.getOperand()).getNumElements();
  std::string dtype = element.isF32()         ? "f32"
                      : element.isF64()       ? "f64"
                      : element.isInteger(32) ? "i32"
                                              : "i64";
  std::string ticket = "ticket" + str(tickets.size());
  body() += "  const uint64_t " + ticket + " = ctx->comm->startAllReduce(" +
            *pointer + ", " + str(count) + ", sharc::rt::DType::" + dtype +
            ", sharc::rt::ReduceOp::" +
            (op.getKind() == CollectiveKind::sum ? "sum" : "max") + ");\n";
  tickets[op.getFuture()] = ticket;
  uint64_t bytes = count * elementBytes(element);
  uint64_t n = options.worldSize;
  report.collectiveCalls[0] += repeat;
  report.collectiveBytes[0] += repeat * (n > 1 ? 2 * (n - 1) * bytes / n : 0);
  recordStart(op.getFuture(), 0, n > 1 ? 2 * (n - 1) * bytes / n : 0);
  planStaging(options.worldSize * ((count + n - 1) / n) *
              elementBytes(element));
  return success();
}

void ProgramEmitter::recordStart(Value future, int kind, uint64_t bytes) {
  ScheduledCollective entry;
  entry.kind = kind;
  entry.bytes = bytes;
  entry.inMicroBatchLoop = repeat > 1;
  startedAt[future] = {computeCalls, entry};
}

void ProgramEmitter::planStaging(int64_t bytes) {
  if (options.target == "cpu" && options.worldSize > 1)
    report.stagingBytes = std::max(report.stagingBytes, bytes);
}

LogicalResult ProgramEmitter::checkGroup(Operation *op, int64_t ranks) {
  if (static_cast<int>(ranks) == options.worldSize)
    return success();
  return op->emitError() << "code generation: '" << op->getName() << "' over "
                         << ranks << " ranks in a program compiled for "
                         << options.worldSize;
}

/// The runtime DType of a collective's float or integer element type.
static std::string collectiveType(Type element) {
  return element.isF32()         ? "f32"
         : element.isF64()       ? "f64"
         : element.isF16()       ? "f16"
         : element.isBF16()      ? "bf16"
         : element.isInteger(32) ? "i32"
                                 : "i64";
}

/// A reduce-scatter (`sum` set; each rank's slice is the result) or an
/// all-gather (the slice is the operand) from `op`'s operand buffer to its
/// result buffer, counted in the report.  A started reduce-scatter's result
/// is its future, whose ticket its wait names.
LogicalResult ProgramEmitter::emitSliceCollective(Operation *op, int64_t ranks,
                                                  std::optional<bool> sum) {
  if (failed(checkGroup(op, ranks)))
    return failure();
  FailureOr<std::string> send = pointerTo(op->getOperand(0)),
                         recv = pointerTo(op->getResult(0));
  if (failed(send) || failed(recv))
    return failure();
  Type element = elementOf(op->getOperand(0));
  bool scatter = sum.has_value();
  bool started = isa<ReduceScatterStartOp, AllGatherStartOp>(op);
  int64_t slice = storedTensorType(scatter ? op->getResult(0).getType()
                                           : op->getOperand(0).getType())
                      .getNumElements();
  std::string call = scatter
                         ? (started ? "startReduceScatter(" : "reduceScatter(")
                         : (started ? "startAllGather(" : "allGather(");
  body() += "  ";
  if (started) {
    std::string ticket = "ticket" + str(tickets.size());
    tickets[op->getResult(0)] = ticket;
    body() += "const uint64_t " + ticket + " = ";
  }
  body() += "ctx->comm->" + call + *send + ", " + *recv + ", " + str(slice) +
            ", sharc::rt::DType::" + collectiveType(element);
  if (scatter)
    body() += std::string(", sharc::rt::ReduceOp::") + (*sum ? "sum" : "max");
  body() += ");\n";
  int kind = scatter ? 1 : 2;
  uint64_t bytes =
      uint64_t(options.worldSize - 1) * slice * elementBytes(element);
  report.collectiveCalls[kind] += repeat;
  report.collectiveBytes[kind] += repeat * bytes;
  if (started)
    recordStart(op->getResult(0), kind, bytes);
  if (scatter)
    planStaging(options.worldSize * slice * elementBytes(element));
  return success();
}

LogicalResult ProgramEmitter::emitShard(ShardOp op) {
  if (failed(checkGroup(op, op.getRanks())))
    return failure();
  FailureOr<std::string> src = pointerTo(op.getOperand()),
                         dest = pointerTo(op.getResult());
  if (failed(src) || failed(dest))
    return failure();
  int64_t bytes = tensorType(op.getResult()).getNumElements() *
                  elementBytes(elementOf(op.getResult()));
  body() += "  sharc::kern::copy(ctx, " + *dest +
            ", static_cast<const char *>(" + *src +
            ") + int64_t(ctx->comm->rank()) * " + str(bytes) + ", " +
            str(bytes) + ");\n";
  return success();
}

LogicalResult ProgramEmitter::emitBroadcastFrom(BroadcastFromOp op) {
  if (failed(checkGroup(op, op.getRanks())))
    return failure();
  FailureOr<std::string> src = pointerTo(op.getOperand()),
                         dest = pointerTo(op.getResult());
  if (failed(src) || failed(dest))
    return failure();
  if (*src != *dest && failed(emitCopy(op.getOperand(), op.getResult())))
    return failure();
  Type element = elementOf(op.getResult());
  int64_t count = tensorType(op.getResult()).getNumElements();
  body() += "  ctx->comm->broadcast(" + *dest + ", " + str(count) +
            ", sharc::rt::DType::" + collectiveType(element) + ", " +
            str(op.getRoot()) + ");\n";
  report.collectiveCalls[3] += repeat;
  if (options.worldSize > 1)
    report.collectiveBytes[3] += repeat * count * elementBytes(element);
  return success();
}

LogicalResult ProgramEmitter::emitSwap(Operation *op, Value argument,
                                       Value memory, bool read) {
  FailureOr<std::string> pointer = pointerTo(memory);
  if (failed(pointer))
    return failure();
  Value future = op->getResult(0);
  std::string ticket = "ticket" + str(tickets.size());
  tickets[future] = ticket;
  swapFutures.insert(future);
  body() += "  const uint64_t " + ticket + " = ctx->swap->" +
            (read ? "startRead(" : "startWrite(") +
            str(bufferOf.lookup(argument)) + ", " + *pointer + ");\n";
  uint64_t bytes = rt::swapBytes(tensorType(argument).getNumElements() *
                                 elementBytes(elementOf(argument)));
  (read ? report.swapReadBytes : report.swapWriteBytes) += repeat * bytes;
  return success();
}

LogicalResult ProgramEmitter::emitTransfer(TransferStartOp op) {
  FailureOr<std::string> src = pointerTo(op.getOperand()),
                         dest = pointerTo(op.getFuture());
  if (failed(src) || failed(dest))
    return failure();
  bool toHost = op.getTo() == Storage::host;
  uint64_t bytes = tensorType(op.getOperand()).getNumElements() *
                   elementBytes(elementOf(op.getOperand()));
  std::string ticket = "ticket" + str(tickets.size());
  tickets[op.getFuture()] = ticket;
  transferFutures.insert(op.getFuture());
  body() += "  const uint64_t " + ticket +
            " = sharc::kern::transferStart(ctx, " + *dest + ", " + *src + ", " +
            str(bytes) + ", " + (toHost ? "true" : "false") + ");\n";
  report.transferBytes += repeat * bytes;
  return success();
}

LogicalResult ProgramEmitter::emitWait(WaitOp op) {
  auto ticket = tickets.find(op.getFuture());
  if (ticket == tickets.end())
    return op.emitError() << "code generation: waits for a collective that "
                             "has not started";
  if (swapFutures.contains(op.getFuture())) {
    body() += "  ctx->swap->wait(" + ticket->second + ");\n";
    return success();
  }
  if (transferFutures.contains(op.getFuture())) {
    body() += "  sharc::kern::transferWait(ctx, " + ticket->second + ");\n";
    return success();
  }
  body() += "  ctx->comm->wait(" + ticket->second + ");\n";
  if (auto started = startedAt.find(op.getFuture());
      started != startedAt.end()) {
    ScheduledCollective entry = started->second.second;
    entry.computeCallsBetween = computeCalls - started->second.first;
    report.schedule.push_back(entry);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitMicroBatchLoop(MicroBatchLoopOp loop) {
  // Collectives in the body (ZeRO's per-micro-batch reduce-scatters) run
  // once per iteration, each start waited for in the same iteration (the
  // verifier keeps a start and its wait in one block); the report counts
  // them `repeat` times.
  Block &loopBody = loop.getBody().front();
  YieldOp yield = loop.getYield();
  // Iteration 0 carries the inits (in place when sharc-plan-memory gave an
  // init its loop's memory).
  for (auto [init, arg, result] :
       llvm::zip(loop.getInits(), loop.getCarriedArgs(), loop.getResults())) {
    FailureOr<std::string> from = pointerTo(init), to = pointerTo(result);
    if (failed(from) || failed(to))
      return failure();
    if (*from != *to && failed(emitCopy(init, result)))
      return failure();
    argumentPointers[arg] = *to;
  }
  for (auto [input, arg] :
       llvm::zip(loop.getInputs(), loop.getMicroBatchArgs())) {
    FailureOr<std::string> base = pointerTo(input);
    if (failed(base))
      return failure();
    int64_t bytes =
        tensorType(arg).getNumElements() * elementBytes(elementOf(arg));
    argumentPointers[arg] = "(reinterpret_cast<char *>(" + *base +
                            ") + micro * " + intLiteral(bytes) + ")";
  }
  body() += "  for (int64_t micro = 0; micro < " + intLiteral(loop.getCount()) +
            "; ++micro) {\n";
  int64_t outer = repeat;
  repeat *= loop.getCount();
  for (Operation &op : loopBody.without_terminator())
    if (failed(emitOp(&op)))
      return failure();
  // The carried values of the next iteration: yielded values that were not
  // computed in place are copied.  A carried argument yielded as is stays.
  for (auto [index, value, result] :
       llvm::enumerate(yield.getOperands(), loop.getResults())) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (arg && arg.getOwner() == &loopBody &&
        arg.getArgNumber() >= loop.getInputs().size()) {
      if (arg != loop.getCarriedArgs()[index])
        return yield.emitError() << "code generation: a micro-batch loop "
                                    "that permutes its carried values is "
                                    "not supported";
      continue;
    }
    FailureOr<std::string> from = pointerTo(value), to = pointerTo(result);
    if (failed(from) || failed(to))
      return failure();
    if (*from != *to && failed(emitCopy(value, result)))
      return failure();
  }
  body() += "  }\n";
  repeat = outer;
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

/// True when `op` reads or writes an f16 or bf16 tensor.
static bool touchesSixteenBits(Operation *op) {
  auto sixteen = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && (tensor.getElementType().isF16() ||
                      tensor.getElementType().isBF16());
  };
  return llvm::any_of(op->getOperandTypes(), sixteen) ||
         llvm::any_of(op->getResultTypes(), sixteen);
}

LogicalResult ProgramEmitter::emitOp(Operation *op) {
  // f16 and bf16 kernels exist for elementwise work, data movement (gathers
  // and scatters included, and the all-gather of ZeRO stage 3's 16-bit
  // parameters), GEMMs and reductions so far; row kernels, losses and
  // convolutions on them are refused here rather than emitted wrong.
  if (touchesSixteenBits(op) && !isFusibleElementwiseOp(op) &&
      !isa<FusionOp, ConstantOp, ReshapeOp, TransposeOp, BroadcastOp, SliceOp,
           ConcatOp, InsertSliceOp, TriluOp, GatherOp, ScatterAddOp, MatmulOp,
           ReduceOp, Conv2DOp, Conv2DInputGradOp, Conv2DWeightGradOp,
           MaxPool2DOp, MaxPool2DGradOp, AvgPool2DOp, AvgPool2DGradOp,
           AllGatherOp, AllGatherStartOp, WaitOp, TransferStartOp,
           SwapInStartOp, SwapOutStartOp, func::ReturnOp>(op))
    return op->emitError() << "code generation: '" << op->getName()
                           << "' on f16/bf16 tensors is not supported yet";
  if (isFusibleElementwiseOp(op) || isa<FusionOp>(op)) {
    hostLaunch = op->hasAttr("sharc.on_host");
    LogicalResult emitted = emitElementwise(op);
    hostLaunch = false;
    return emitted;
  }
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConstantOp) { return success(); })
      .Case([&](MatmulOp op) {
        // A GEMM with an epilogue is emitted where its user is.
        return op->hasAttr("sharc.fuse_into") ? success() : emitMatmul(op);
      })
      .Case([&](ReduceOp op) { return emitReduce(op); })
      .Case([&](SoftmaxOp op) { return emitSoftmax(op, op.getAxis(), false); })
      .Case(
          [&](LogSoftmaxOp op) { return emitSoftmax(op, op.getAxis(), true); })
      .Case([&](LayerNormOp op) { return emitLayerNorm(op); })
      .Case([&](NllLossOp op) {
        return emitLoss(op, op.getInput(), op.getTarget(), op.getWeight(),
                        op.getReduction(), op.getIgnoreIndex(), false);
      })
      .Case([&](CrossEntropyOp op) {
        return emitLoss(op, op.getLogits(), op.getTarget(), op.getWeight(),
                        op.getReduction(), op.getIgnoreIndex(), true);
      })
      .Case([&](ReshapeOp) { return success(); })
      .Case([&](TransposeOp op) {
        // Read in place by the GEMMs it feeds (sharc-fuse's gemm-views).
        if (op->hasAttr("sharc.fuse_into"))
          return success();
        // Written by the GEMM that feeds it.
        if (op->hasAttr("sharc.gemm_output"))
          return emitMatmul(op.getOperand().getDefiningOp<MatmulOp>(),
                            op.getResult());
        ArrayRef<int64_t> inShape = tensorType(op.getOperand()).getShape();
        SmallVector<int64_t> inStrides = rowMajorStrides(inShape);
        SmallVector<int64_t> strides;
        for (int64_t p : op.getPermutation())
          strides.push_back(inStrides[p]);
        return emitIndexMap(
            op, op.getOperand(),
            affineOffset(tensorType(op.getResult()).getShape(), strides, 0));
      })
      .Case([&](BroadcastOp op) {
        return emitIndexMap(
            op, op.getOperand(),
            "    const int64_t offset = " +
                broadcastIndex(tensorType(op.getOperand()).getShape(),
                               tensorType(op.getResult()).getShape()) +
                ";\n");
      })
      .Case([&](SliceOp op) {
        SmallVector<int64_t> inStrides =
            rowMajorStrides(tensorType(op.getOperand()).getShape());
        SmallVector<int64_t> strides;
        int64_t base = 0;
        for (auto [d, start, stride] :
             llvm::enumerate(op.getStart(), op.getStride())) {
          base += start * inStrides[d];
          strides.push_back(stride * inStrides[d]);
        }
        return emitIndexMap(
            op, op.getOperand(),
            affineOffset(tensorType(op.getResult()).getShape(), strides, base));
      })
      .Case([&](IotaOp op) {
        auto type = tensorType(op.getResult());
        FailureOr<std::string> out = typedPointer(op.getResult());
        if (failed(out))
          return failure();
        KernelText kernel;
        std::string storage = storageType(type.getElementType());
        std::string dst = kernel.pointer(storage, false, *out);
        kernel.body =
            "    " + dst + "[i] = static_cast<" + storage + ">(" +
            iotaIndex(type, op.getDimension(), "i", type.getNumElements()) +
            ");\n";
        launch(kernel, type.getNumElements());
        return success();
      })
      .Case([&](DropoutMaskOp op) {
        // One call per group of 4 positions of a row: one Philox block.
        auto type = tensorType(op.getResult());
        int64_t count = type.getNumElements();
        int64_t numRows = tensorType(op.getRows()).getNumElements();
        bool blocked = count % numRows == 0;
        int64_t perRow = blocked ? count / numRows : count;
        int64_t groups = (perRow + 3) / 4;
        FailureOr<std::string> step = typedPointer(op.getStep()),
                               rows = typedPointer(op.getRows()),
                               out = typedPointer(op.getResult());
        if (failed(step) || failed(rows) || failed(out))
          return failure();
        KernelText kernel;
        kernel.work = 4;
        std::string stepIn = kernel.pointer("int64_t", true, *step);
        std::string rowsIn = kernel.pointer("int64_t", true, *rows);
        std::string dst = kernel.pointer("bool", false, *out);
        kernel.body =
            "    const int64_t b = i / " + str(groups) + ", g = i % " +
            str(groups) +
            ";\n"
            "    const unsigned bits = sharc::random::dropoutKeepBits(" +
            std::to_string(static_cast<uint64_t>(op.getSeed())) + "ull, " +
            str(op.getStream()) + "u, static_cast<uint64_t>(" + stepIn +
            "[0]), " +
            (blocked ? "static_cast<uint64_t>(" + rowsIn + "[b])"
                     : std::string("0")) +
            ", static_cast<uint64_t>(g), " +
            std::to_string(
                random::dropoutThreshold(op.getRatio().convertToDouble())) +
            "ull);\n"
            "    for (int64_t k = 0; k < 4 && 4 * g + k < " +
            str(perRow) + "; ++k)\n      " + dst + "[b * " + str(perRow) +
            " + 4 * g + k] = (bits >> k) & 1u;\n";
        launch(kernel, (blocked ? numRows : 1) * groups);
        return success();
      })
      .Case([&](SampleRowsOp op) {
        auto type = tensorType(op.getResult());
        FailureOr<std::string> out = typedPointer(op.getResult());
        if (failed(out))
          return failure();
        KernelText kernel;
        std::string dst = kernel.pointer("int64_t", false, *out);
        kernel.members.push_back("const int64_t base");
        kernel.arguments.push_back(
            "int64_t(ctx->comm ? ctx->comm->rank() : 0) * " +
            str(type.getNumElements()));
        kernel.body = "    " + dst + "[i] = base + i;\n";
        launch(kernel, type.getNumElements());
        return success();
      })
      .Case([&](TriluOp op) {
        auto type = tensorType(op.getResult());
        int64_t rows = type.getDimSize(type.getRank() - 2);
        int64_t cols = type.getShape().back();
        int64_t diagonal = std::clamp(static_cast<int64_t>(op.getDiagonal()),
                                      -(rows + cols), rows + cols);
        FailureOr<std::string> in = typedPointer(op.getOperand()),
                               out = typedPointer(op.getResult());
        if (failed(in) || failed(out))
          return failure();
        KernelText kernel;
        std::string storage = storageType(type.getElementType());
        std::string src = kernel.pointer(storage, true, *in);
        std::string dst = kernel.pointer(storage, false, *out);
        kernel.body = "    const int64_t row = (i / " + str(cols) + ") % " +
                      str(rows) + ", col = i % " + str(cols) + ";\n" +
                      "    const bool keep = col " +
                      (op.getUpper() ? ">=" : "<=") + " row + " +
                      intLiteral(diagonal) + ";\n" + "    " + dst +
                      "[i] = keep ? " + src + "[i] : " + storage + "(0);\n";
        launch(kernel, type.getNumElements());
        return success();
      })
      .Case<Conv2DOp, Conv2DInputGradOp, Conv2DWeightGradOp, MaxPool2DOp,
            MaxPool2DGradOp, AvgPool2DOp, AvgPool2DGradOp>(
          [&](Operation *op) { return emitWindowOp(op); })
      .Case([&](ConcatOp op) { return emitConcat(op); })
      .Case([&](InsertSliceOp op) { return emitInsertSlice(op); })
      .Case([&](GatherOp op) { return emitGather(op); })
      .Case([&](ScatterAddOp op) { return emitScatterAdd(op); })
      .Case([&](AllReduceStartOp op) { return emitAllReduceStart(op); })
      .Case([&](WaitOp op) { return emitWait(op); })
      .Case([&](ReduceScatterOp op) {
        return emitSliceCollective(op, op.getRanks(),
                                   op.getKind() == CollectiveKind::sum);
      })
      .Case([&](ReduceScatterStartOp op) {
        return emitSliceCollective(op, op.getRanks(),
                                   op.getKind() == CollectiveKind::sum);
      })
      .Case([&](AllGatherOp op) {
        return emitSliceCollective(op, op.getRanks(), std::nullopt);
      })
      .Case([&](AllGatherStartOp op) {
        return emitSliceCollective(op, op.getRanks(), std::nullopt);
      })
      .Case([&](ShardOp op) { return emitShard(op); })
      .Case([&](BroadcastFromOp op) { return emitBroadcastFrom(op); })
      .Case([&](TransferStartOp op) { return emitTransfer(op); })
      .Case([&](SwapInStartOp op) {
        return emitSwap(op, op.getOperand(), op.getFuture(), /*read=*/true);
      })
      .Case([&](SwapOutStartOp op) {
        return emitSwap(op, op.getTarget(), op.getValue(), /*read=*/false);
      })
      .Case([&](AllReduceOp op) {
        return op.emitError() << "code generation: a synchronous all_reduce "
                                 "(run sharc-schedule-collectives)";
      })
      .Case([&](MicroBatchLoopOp op) { return emitMicroBatchLoop(op); })
      .Case([&](func::ReturnOp op) { return emitReturn(op); })
      .Default([](Operation *op) {
        return op->emitError()
               << "code generation: '" << op->getName()
               << "' is not supported by the code generator yet";
      });
}

LogicalResult ProgramEmitter::emitReturn(func::ReturnOp ret) {
  if (library)
    return emitLibraryReturn(ret);
  Block &entry = step.getBody().front();
  // Results that are arguments first: an output may return the value a
  // state buffer held before the step (the loss scale the step used) while
  // another result overwrites that buffer.
  SmallVector<unsigned> order;
  for (bool arguments : {true, false})
    for (auto [r, value] : llvm::enumerate(ret.getOperands()))
      if (isa<BlockArgument>(value) == arguments)
        order.push_back(r);
  for (unsigned r : order) {
    Value value = ret.getOperand(r);
    int target = -1;
    if (std::optional<unsigned> updated = getUpdatedArgument(step, r))
      target = bufferOf[entry.getArgument(*updated)];
    if (auto name = step.getResultAttrOfType<StringAttr>(
            r, SharcDialect::getOutputAttrName()))
      target = outputBuffer(name.getValue());
    if (target < 0)
      return ret.emitError() << "code generation: result " << r
                             << " of @train_step has no destination";
    // An offloaded buffer's new value is in its file already: its swap-out
    // wrote it (or it is unchanged).
    if (buffers[target].offloaded) {
      Value stored = value;
      if (auto wait = value.getDefiningOp<WaitOp>())
        if (auto out = wait.getFuture().getDefiningOp<SwapOutStartOp>())
          stored = out.getTarget();
      std::optional<unsigned> updated = getUpdatedArgument(step, r);
      if (!updated || stored != entry.getArgument(*updated))
        return ret.emitError()
               << "code generation: result " << r << " is the new value of "
               << "offloaded '" << buffers[target].name
               << "' but was not written to its file (sharc.swap_out_start)";
      continue;
    }
    FailureOr<std::string> src = pointerTo(value);
    if (failed(src))
      return failure();
    const Buffer &buffer = buffers[target];
    int64_t bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    std::string dest = "ctx->buffers[" + str(target) + "]";
    if (*src != dest)
      body() += std::string("  sharc::kern::") +
                (buffer.inHost ? "copyHost(" : "copy(ctx, ") + dest + ", " +
                *src + ", " + str(bytes) + ");\n";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The translation unit
//===----------------------------------------------------------------------===//

FailureOr<int64_t> ProgramEmitter::emitFunction() {
  if (!step.getBody().hasOneBlock())
    return step.emitError() << "code generation needs a single-block function";
  if (failed(library ? collectLibraryBuffers() : collectBuffers()))
    return failure();
  auto arena = step->getAttrOfType<IntegerAttr>("sharc.arena_bytes");
  if (!arena)
    return step.emitError()
           << "code generation: no memory plan (run sharc-plan-memory)";
  for (Operation &op : step.getBody().front())
    if (failed(emitOp(&op)))
      return failure();
  return arena.getInt();
}

void ProgramEmitter::writeKernelsAndTables(llvm::raw_ostream &os) const {
  os << kernelDefinitions;
  for (auto [i, buffer] : llvm::enumerate(buffers))
    if (buffer.role == "constant")
      os << "const " << storageType(buffer.element) << " constant" << i
         << "[] = {" << buffer.constantData << "};\n";
  os << "\nconst char *const messages[] = {\n";
  for (const std::string &message : messages)
    os << "  " << cppStringLiteral(message) << ",\n";
  os << "  nullptr};\n\n";
}

/// ZeRO: the most bytes of gathered parameters (the results of the
/// all-gathers marked `sharc.parameter_gather`, or of the waits of such
/// started ones) live at once in `block`, each from its all-gather (or
/// start) to its last reader (getLastGatheredReader); a micro-batch loop
/// adds the peak of its body while it runs.
static int64_t gatheredParameterPeak(Block &block) {
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = static_cast<int64_t>(i);
  // (position, +bytes) where a gather starts, (position, -bytes) after its
  // last reader.
  SmallVector<std::pair<int64_t, int64_t>> events;
  for (Operation &op : block) {
    if (auto loop = dyn_cast<MicroBatchLoopOp>(op)) {
      int64_t inner = gatheredParameterPeak(loop.getBody().front());
      events.emplace_back(position[&op], inner);
      events.emplace_back(position[&op] + 1, -inner);
    }
    if (!op.hasAttr("sharc.parameter_gather"))
      continue;
    Value result = op.getResult(0);
    if (auto start = dyn_cast<AllGatherStartOp>(op))
      for (Operation *wait : start.getFuture().getUsers())
        result = wait->getResult(0);
    auto type = cast<RankedTensorType>(result.getType());
    int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
    events.emplace_back(position[&op], bytes);
    events.emplace_back(position[getLastGatheredReader(result, block)] + 1,
                        -bytes);
  }
  llvm::sort(events);
  int64_t live = 0, peak = 0;
  for (auto [at, bytes] : events)
    peak = std::max(peak, live += bytes);
  return peak;
}

LogicalResult ProgramEmitter::run(llvm::raw_ostream &os) {
  FailureOr<int64_t> arenaBytes = emitFunction();
  if (failed(arenaBytes))
    return failure();

  report.numKernels = static_cast<int>(kernelNames.size());
  report.arenaBytes = *arenaBytes;
  if (auto host = step->getAttrOfType<IntegerAttr>("sharc.host_arena_bytes"))
    report.hostArenaBytes = host.getInt();
  // Every parameter and state buffer gets a file of its own, whatever the
  // model calls its tensors (an initializer named "step", names that differ
  // only in characters a file name cannot hold).
  // Derived state has no file.
  auto hasFile = [](const Buffer &buffer) {
    return (buffer.role == "param" || buffer.role == "state") &&
           buffer.derivedFrom < 0;
  };
  // Files are named after the ONNX names, as the evaluator names them
  // (`sharc eval --dump-state`): <onnx name>.npy, <onnx name>.<role>.npy.
  llvm::StringMap<std::string> sourceOf;
  for (const Buffer &buffer : buffers)
    if (buffer.role == "param")
      sourceOf[buffer.name] =
          buffer.source.empty() ? buffer.name : buffer.source;
  std::vector<std::string> persistentNames;
  for (const Buffer &buffer : buffers)
    if (hasFile(buffer))
      persistentNames.push_back(
          buffer.role == "param" ? sourceOf.lookup(buffer.name)
          : buffer.stateOf.empty()
              ? buffer.name
              : sourceOf.lookup(buffer.stateOf) +
                    buffer.name.substr(buffer.stateOf.size()));
  std::vector<std::string> files = rt::npyFileNames(persistentNames);
  size_t nextFile = 0;
  for (Buffer &buffer : buffers)
    if (hasFile(buffer))
      buffer.file = files[nextFile++];
  for (const Buffer &buffer : buffers) {
    ReportBuffer entry;
    entry.name = buffer.name;
    entry.file = buffer.file;
    entry.role = buffer.role;
    entry.type = dtypeEnumerator(buffer.element);
    entry.shape.assign(buffer.shape.begin(), buffer.shape.end());
    entry.fileShape.assign(buffer.fileShape.begin(), buffer.fileShape.end());
    entry.bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    entry.trainable = buffer.trainable;
    entry.initialValue = buffer.initialValue;
    entry.offloaded = buffer.offloaded;
    entry.inHost = buffer.inHost;
    if (buffer.derivedFrom >= 0)
      entry.derivedFrom = buffers[buffer.derivedFrom].name;
    if (buffer.offloaded)
      report.nvmeBytes += rt::swapBytes(entry.bytes);
    if (buffer.inHost)
      report.hostBytes += entry.bytes;
    if (buffer.role == "param") {
      report.paramBytes += entry.bytes;
      // From ZeRO stage 2 on a rank keeps only its slice of each gradient
      // (ceil(n / N) elements) past backward.
      int64_t elements = numElements(buffer.fileShape);
      if (options.zeroStage >= 2)
        elements = (elements + options.worldSize - 1) / options.worldSize;
      if (buffer.trainable)
        report.gradientBytes += elements * elementBytes(buffer.element);
    } else if (buffer.derivedFrom >= 0) {
      report.carriedCopyBytes += entry.bytes;
    } else if (buffer.role == "state") {
      report.stateBytes += entry.bytes;
    }
    report.buffers.push_back(std::move(entry));
  }
  for (BlockArgument arg : step.getBody().front().getArguments()) {
    // A partitioned parameter's compute copy is gathered whole (below).
    if (!getParamAttr(step, arg.getArgNumber()) ||
        getSliceAttr(step, arg.getArgNumber()))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    auto isCopy = [&](Value result) {
      auto copy = dyn_cast<RankedTensorType>(result.getType());
      return copy && copy.getShape() == type.getShape() &&
             (copy.getElementType().isF16() || copy.getElementType().isBF16());
    };
    if (llvm::any_of(arg.getUsers(), [&](Operation *user) {
          return llvm::any_of(user->getResults(), isCopy);
        }))
      report.computeCopyBytes += type.getNumElements() * 2;
  }
  report.gatheredParameterPeakBytes =
      gatheredParameterPeak(step.getBody().front());

  os << "// Generated by sharc compile (target " << options.target
     << "). Do not edit.\n"
     << "#include \"runtime/Errors.h\"\n"
     << "#include \"runtime/Kernels.h\"\n\n"
     << "namespace {\nusing namespace sharc::kern;\n\n";
  writeKernelsAndTables(os);
  os << "const sharc::rt::BufferSpec buffers[] = {\n";
  for (auto [i, buffer] : llvm::enumerate(buffers)) {
    os << "  {" << cppStringLiteral(buffer.name) << ", "
       << cppStringLiteral(buffer.source) << ", "
       << cppStringLiteral(buffer.file)
       << ", sharc::rt::BufferRole::" << buffer.role
       << ", sharc::rt::DType::" << dtypeEnumerator(buffer.element) << ", "
       << buffer.shape.size() << ", {";
    for (auto [d, size] : llvm::enumerate(buffer.shape))
      os << (d ? ", " : "") << size;
    int64_t bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    os << "}, " << numElements(buffer.shape) << ", " << bytes << ", "
       << (buffer.role == "constant" ? "constant" + str(i) : "nullptr") << ", "
       << (buffer.sliced ? "true" : "false") << ", " << buffer.fileShape.size()
       << ", {";
    for (auto [d, size] : llvm::enumerate(buffer.fileShape))
      os << (d ? ", " : "") << size;
    os << "}, sharc::rt::BufferStorage::"
       << (buffer.offloaded ? "nvme"
           : buffer.inHost  ? "host"
                            : "device")
       << ", " << buffer.derivedFrom << "},\n";
  }
  os << "};\n\n";
  os << "const sharc::rt::ProgramInfo info = {\n"
     << "  sharc::rt::kProgramAbiVersion, " << cppStringLiteral(options.model)
     << ", " << cppStringLiteral(options.target) << ",\n  " << options.worldSize
     << ", " << options.microBatch << ", " << options.gradientAccumulation
     << ", " << report.arenaBytes << ",\n  " << buffers.size() << ", buffers, "
     << lossBuffer << ", " << lrBuffer << ", " << stepBuffer << ", "
     << outputBuffer("grad_norm") << ", " << outputBuffer("loss_scale") << ", "
     << outputBuffer("overflow") << ", " << outputBuffer("at_min_scale") << ", "
     << options.zeroStage << ", " << report.stagingBytes << ",\n  {";
  for (size_t k = 0; k < 4; ++k)
    os << (k ? ", " : "") << report.collectiveCalls[k] << "u";
  os << "},\n  {";
  for (size_t k = 0; k < 4; ++k)
    os << (k ? ", " : "") << report.collectiveBytes[k] << "u";
  os << "},\n  " << report.numKernels << ", " << report.numGemmCalls << ",\n  {"
     << cppStringLiteral(options.nvmePath) << ", " << options.aioBlockSize
     << ", " << options.aioQueueDepth << ", "
     << (options.aioSingleSubmit ? "true" : "false") << ", "
     << (options.aioOverlapEvents ? "true" : "false") << ", "
     << report.swapReadBytes << "u, " << report.swapWriteBytes << "u},\n  "
     << report.hostArenaBytes << ", " << report.transferBytes << "u,\n  "
     << cppStringLiteral(options.sharcVersion) << ", "
     << cppStringLiteral(options.modelHash) << ",\n  "
     << cppStringLiteral(options.trainingConfig) << ", "
     << cppStringLiteral(options.csvMonitorFolder) << ", "
     << cppStringLiteral(options.tensorboardFolder) << "};\n} // namespace\n\n";
  os << "extern \"C\" const sharc::rt::ProgramInfo *sharcProgramInfo() {\n"
     << "  return &info;\n}\n\n"
     << "extern \"C\" void sharcProgramStep(const sharc::rt::StepContext "
        "*ctx) {\n"
     << body() << "  ctx->comm->waitAll();\n"
     << "  if (int code = sharc::kern::takeError(ctx))\n"
     << "    sharc::rt::fatal(std::string(\"step failed: \") + "
        "messages[code - 1]);\n"
     << "}\n";
  return success();
}

} // namespace sharc::codegen

FailureOr<EmitOptions> sharc::programOptionsOf(func::FuncOp step) {
  EmitOptions options;
  if (auto ranks = step->getAttrOfType<IntegerAttr>("sharc.world_size"))
    options.worldSize = static_cast<int>(ranks.getInt());
  if (auto stage = step->getAttrOfType<IntegerAttr>("sharc.zero_stage"))
    options.zeroStage = static_cast<int>(stage.getInt());
  step.walk([&](MicroBatchLoopOp loop) {
    options.gradientAccumulation = loop.getCount();
  });
  for (BlockArgument arg : step.getArguments())
    if (step.getArgAttr(arg.getArgNumber(), SharcDialect::getInputAttrName())) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() == 0)
        return step.emitError() << "code generation: data input #"
                                << arg.getArgNumber() << " is a scalar";
      options.microBatch = type.getDimSize(0) / options.gradientAccumulation;
      break;
    }
  return options;
}

LogicalResult sharc::emitProgram(func::FuncOp step, const EmitOptions &options,
                                 llvm::raw_ostream &os, ProgramReport &report) {
  return codegen::ProgramEmitter(step, options, report).run(os);
}
