//===- OpImportersRecurrent.cpp - ONNX RNN, GRU and LSTM ------------------===//
//
// The recurrent operators, unrolled over the (static) sequence length into
// sharc's primitives, so that their gradients come from the primitives'.
//
// Each direction projects the whole input at once (one matmul of the
// [seq * batch, input] rows by W^T, plus the biases that do not depend on
// the state), then runs one step per time index: a matmul of the state by
// R^T, the gates' activations and the state update.  The reverse direction
// walks the time indices backwards.  With `sequence_lens`, a step at time
// t >= sequence_lens[b] leaves the state of batch entry b unchanged and
// gives zeros in Y (a select), so Y_h and Y_c hold the last valid state
// (zeros for an entry of length 0, as onnxruntime gives) and the reverse
// direction starts at each entry's own last element.  A constant
// `sequence_lens` equal to the sequence length everywhere is no mask.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/ImporterInternal.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <array>
#include <functional>

using namespace mlir;
using namespace sharc;
using namespace sharc::onnx_import;

namespace {

/// Which recurrent operator is imported.
enum class Cell { rnn, gru, lstm };

/// An activation function of a recurrent operator, its name lowercased, with
/// its alpha and beta (defaults filled in).
struct Activation {
  std::string name;
  double alpha = 0.0;
  double beta = 0.0;
};

/// What the operators have in common, read and checked from the node.
struct Recurrent {
  Cell cell;
  /// Gates per direction: 1 (RNN), 3 (GRU), 4 (LSTM).
  int64_t numGates;
  /// X time-major: [seq, batch, input].
  Value x;
  int64_t seqLength, batch, inputSize, hidden, numDirections;
  bool reverse;
  bool batchMajor;
  Type elementType;
  /// W, R: [numDirections, numGates * hidden, input or hidden].
  Value w, r;
  /// B: [numDirections, 2 * numGates * hidden], or null.
  Value b;
  /// sequence_lens as [batch, 1], or null when absent (or all full).
  Value lengths;
  /// initial_h (and initial_c) time-major: [numDirections, batch, hidden],
  /// or null.
  Value initialH, initialC;
  /// Activations per direction, direction after direction.
  SmallVector<Activation> activations;
  std::optional<double> clip;
};

/// The functions' names (lowercase), how many of alpha and beta each takes,
/// and their defaults (ONNX's defaults of the operators of the same names).
struct ActivationInfo {
  const char *name;
  bool takesAlpha, takesBeta;
  double alpha, beta;
};

const ActivationInfo kActivations[] = {
    {"relu", false, false, 0.0, 0.0},
    {"tanh", false, false, 0.0, 0.0},
    {"sigmoid", false, false, 0.0, 0.0},
    {"affine", true, true, 1.0, 0.0},
    {"leakyrelu", true, false, static_cast<double>(0.01f), 0.0},
    {"thresholdedrelu", true, false, 1.0, 0.0},
    {"scaledtanh", true, true, 1.0, 1.0},
    {"hardsigmoid", true, true, static_cast<double>(0.2f), 0.5},
    {"elu", true, false, 1.0, 0.0},
    {"softsign", false, false, 0.0, 0.0},
    {"softplus", false, false, 0.0, 0.0},
};

} // namespace

/// The `activations`, `activation_alpha` and `activation_beta` attributes:
/// `perDirection` functions per direction (`defaults` when the attribute is
/// absent).  Alpha and beta values are consumed in order by the functions
/// that take them (as onnxruntime reads them); missing ones take the
/// function's default and extra ones are ignored (as by onnxruntime).
static FailureOr<SmallVector<Activation>>
readActivations(NodeImporter &n, ArrayRef<const char *> defaults,
                int64_t numDirections) {
  SmallVector<std::string> names;
  if (std::optional<SmallVector<std::string>> given =
          n.getStrings("activations")) {
    names = std::move(*given);
    if (int64_t(names.size()) != int64_t(defaults.size()) * numDirections)
      return n.emitError() << "activations must name "
                           << defaults.size() * numDirections << " functions ("
                           << defaults.size() << " per direction), got "
                           << names.size();
  } else {
    for (int64_t d = 0; d < numDirections; ++d)
      for (const char *name : defaults)
        names.push_back(name);
  }
  SmallVector<double> alphas =
      n.getFloats("activation_alpha").value_or(SmallVector<double>());
  SmallVector<double> betas =
      n.getFloats("activation_beta").value_or(SmallVector<double>());
  size_t nextAlpha = 0, nextBeta = 0;
  SmallVector<Activation> result;
  for (const std::string &name : names) {
    std::string lower = llvm::StringRef(name).lower();
    const ActivationInfo *info =
        llvm::find_if(kActivations, [&](const ActivationInfo &entry) {
          return lower == entry.name;
        });
    if (info == std::end(kActivations))
      return n.emitError() << "unsupported activation function '" << name
                           << "' (supported: Relu, Tanh, Sigmoid, Affine, "
                              "LeakyRelu, ThresholdedRelu, ScaledTanh, "
                              "HardSigmoid, Elu, Softsign, Softplus)";
    Activation activation{lower, info->alpha, info->beta};
    if (info->takesAlpha && nextAlpha < alphas.size())
      activation.alpha = alphas[nextAlpha++];
    if (info->takesBeta && nextBeta < betas.size())
      activation.beta = betas[nextBeta++];
    result.push_back(std::move(activation));
  }
  return result;
}

/// `activation` applied to `x`.
static FailureOr<Value> activate(NodeImporter &n, const Activation &activation,
                                 Value x) {
  Type type = elementTypeOf(x);
  auto s = [&](double value) { return n.scalar(type, value); };
  StringRef name = activation.name;
  double alpha = activation.alpha, beta = activation.beta;
  if (name == "relu")
    return n.create<ReluOp>(x);
  if (name == "tanh")
    return n.create<TanhOp>(x);
  if (name == "sigmoid")
    return n.create<SigmoidOp>(x);
  if (name == "affine") {
    SHARC_TRY(scaled, n.create<MulOp>(x, s(alpha)));
    return n.create<AddOp>(*scaled, s(beta));
  }
  if (name == "leakyrelu") {
    SHARC_TRY(negative, n.create<CompareOp>(x, s(0.0), ComparePredicate::lt));
    SHARC_TRY(scaled, n.create<MulOp>(x, s(alpha)));
    return n.create<SelectOp>(*negative, *scaled, x);
  }
  if (name == "thresholdedrelu") {
    SHARC_TRY(above, n.create<CompareOp>(x, s(alpha), ComparePredicate::gt));
    return n.create<SelectOp>(*above, x, s(0.0));
  }
  if (name == "scaledtanh") {
    SHARC_TRY(scaled, n.create<MulOp>(x, s(beta)));
    SHARC_TRY(tanh, n.create<TanhOp>(*scaled));
    return n.create<MulOp>(*tanh, s(alpha));
  }
  if (name == "hardsigmoid") {
    SHARC_TRY(scaled, n.create<MulOp>(x, s(alpha)));
    SHARC_TRY(shifted, n.create<AddOp>(*scaled, s(beta)));
    SHARC_TRY(capped, n.create<MinOp>(*shifted, s(1.0)));
    return n.create<MaxOp>(*capped, s(0.0));
  }
  if (name == "elu") {
    SHARC_TRY(exp, n.create<ExpOp>(x));
    SHARC_TRY(em1, n.create<SubOp>(*exp, s(1.0)));
    SHARC_TRY(scaled, n.create<MulOp>(*em1, s(alpha)));
    SHARC_TRY(negative, n.create<CompareOp>(x, s(0.0), ComparePredicate::lt));
    return n.create<SelectOp>(*negative, *scaled, x);
  }
  if (name == "softsign") {
    SHARC_TRY(abs, n.create<AbsOp>(x));
    SHARC_TRY(denominator, n.create<AddOp>(*abs, s(1.0)));
    return n.create<DivOp>(x, *denominator);
  }
  assert(name == "softplus" && "activation checked by readActivations");
  SHARC_TRY(exp, n.create<ExpOp>(x));
  SHARC_TRY(sum, n.create<AddOp>(*exp, s(1.0)));
  return n.create<LogOp>(*sum);
}

/// `activation` applied to `x` clipped to [-clip, clip] when a clip is set.
static FailureOr<Value> activateClipped(NodeImporter &n, const Recurrent &rec,
                                        const Activation &activation, Value x) {
  if (rec.clip) {
    Type type = elementTypeOf(x);
    SHARC_TRY(low, n.create<MinOp>(x, n.scalar(type, *rec.clip)));
    SHARC_TRY(high, n.create<MaxOp>(*low, n.scalar(type, -*rec.clip)));
    x = *high;
  }
  return activate(n, activation, x);
}

/// Entry `index` of the leading dimension of `value`, without that
/// dimension.
static FailureOr<Value> takeLeading(NodeImporter &n, Value value,
                                    int64_t index) {
  if (shapeOf(value)[0] == 1)
    return n.reshape(value, shapeOf(value).drop_front());
  SHARC_TRY(slice, sliceAlong(n, value, 0, index, 1));
  return n.reshape(*slice, shapeOf(value).drop_front());
}

/// Elements [start, start + count) of the last dimension of `value`.
static FailureOr<Value> takeLast(NodeImporter &n, Value value, int64_t start,
                                 int64_t count) {
  return sliceAlong(n, value, rankOf(value) - 1, start, count);
}

/// An error naming `what` unless `value` has `shape`.
static LogicalResult requireShape(NodeImporter &n, Value value,
                                  ArrayRef<int64_t> shape, StringRef what) {
  if (shapeOf(value) == shape)
    return success();
  return n.emitError() << what << " must have shape " << formatShape(shape)
                       << ", got " << formatShape(shapeOf(value));
}

/// An error naming `what` unless `value` has the element type of X.
static LogicalResult requireElementType(NodeImporter &n, const Recurrent &rec,
                                        Value value, StringRef what) {
  if (elementTypeOf(value) == rec.elementType)
    return success();
  return n.emitError() << what << " must have X's element type "
                       << rec.elementType << ", got " << value.getType();
}

/// Reads and checks the inputs and attributes common to RNN, GRU and LSTM.
/// `initialCIndex` is the input index of initial_c (LSTM), or 0.
static FailureOr<Recurrent> readRecurrent(NodeImporter &n, Cell cell,
                                          ArrayRef<const char *> defaults,
                                          unsigned initialCIndex) {
  Recurrent rec;
  rec.cell = cell;
  rec.numGates = cell == Cell::rnn ? 1 : cell == Cell::gru ? 3 : 4;
  std::string direction = n.getString("direction", "forward");
  if (direction == "forward" || direction == "reverse")
    rec.numDirections = 1;
  else if (direction == "bidirectional")
    rec.numDirections = 2;
  else
    return n.emitError() << "unsupported direction '" << direction
                         << "' (forward, reverse or bidirectional)";
  rec.reverse = direction == "reverse";
  int64_t layout = n.getInt("layout", 0);
  if (layout != 0 && layout != 1)
    return n.emitError() << "layout must be 0 or 1, got " << layout;
  rec.batchMajor = layout == 1;

  Value x = n.input(0);
  if (rankOf(x) != 3)
    return n.emitError() << "X must be 3-D, got " << x.getType();
  if (!isa<FloatType>(elementTypeOf(x)))
    return n.emitError() << "X must be a floating-point tensor, got "
                         << x.getType();
  rec.elementType = elementTypeOf(x);
  if (rec.batchMajor) {
    SHARC_TRY(transposed, n.create<TransposeOp>(x, ArrayRef<int64_t>{1, 0, 2}));
    x = *transposed;
  }
  rec.x = x;
  rec.seqLength = shapeOf(x)[0];
  rec.batch = shapeOf(x)[1];
  rec.inputSize = shapeOf(x)[2];
  if (rec.seqLength == 0)
    return n.emitError() << "the sequence length must not be 0";

  rec.w = n.input(1);
  rec.r = n.input(2);
  if (failed(requireElementType(n, rec, rec.w, "W")) ||
      failed(requireElementType(n, rec, rec.r, "R")))
    return failure();
  if (rankOf(rec.r) != 3)
    return n.emitError() << "R must be 3-D, got " << rec.r.getType();
  rec.hidden = shapeOf(rec.r)[2];
  if (n.hasAttr("hidden_size") && n.getInt("hidden_size", 0) != rec.hidden)
    return n.emitError() << "hidden_size " << n.getInt("hidden_size", 0)
                         << " does not match R's shape "
                         << formatShape(shapeOf(rec.r));
  if (rec.hidden <= 0)
    return n.emitError() << "the hidden size must be positive, got "
                         << rec.hidden;
  int64_t rows = rec.numGates * rec.hidden;
  if (failed(requireShape(n, rec.w, {rec.numDirections, rows, rec.inputSize},
                          "W")) ||
      failed(
          requireShape(n, rec.r, {rec.numDirections, rows, rec.hidden}, "R")))
    return failure();
  if (n.hasInput(3)) {
    rec.b = n.input(3);
    if (failed(requireElementType(n, rec, rec.b, "B")) ||
        failed(requireShape(n, rec.b, {rec.numDirections, 2 * rows}, "B")))
      return failure();
  }

  if (n.hasInput(4)) {
    Value lengths = n.input(4);
    Type type = elementTypeOf(lengths);
    if (!isa<IntegerType>(type) || type.getIntOrFloatBitWidth() == 1)
      return n.emitError() << "sequence_lens must be an integer tensor, got "
                           << lengths.getType();
    if (failed(requireShape(n, lengths, {rec.batch}, "sequence_lens")))
      return failure();
    bool full = false;
    if (std::optional<Tensor> constant = n.constantInput(4)) {
      full = true;
      for (int64_t i = 0; i < constant->numElements(); ++i) {
        int64_t length = constant->getInt(i);
        if (length < 0 || length > rec.seqLength)
          return n.emitError()
                 << "sequence_lens[" << i << "] = " << length
                 << " is out of range [0, " << rec.seqLength << "]";
        full &= length == rec.seqLength;
      }
    }
    if (!full) {
      SHARC_TRY(column, n.reshape(lengths, {rec.batch, 1}));
      rec.lengths = *column;
    }
  }

  auto readInitial = [&](unsigned index, StringRef what) -> FailureOr<Value> {
    if (index == 0 || !n.hasInput(index))
      return Value();
    Value value = n.input(index);
    if (failed(requireElementType(n, rec, value, what)))
      return failure();
    SmallVector<int64_t> expected = {rec.numDirections, rec.batch, rec.hidden};
    if (rec.batchMajor)
      std::swap(expected[0], expected[1]);
    if (failed(requireShape(n, value, expected, what)))
      return failure();
    if (!rec.batchMajor)
      return value;
    return n.create<TransposeOp>(value, ArrayRef<int64_t>{1, 0, 2});
  };
  FailureOr<Value> initialH = readInitial(5, "initial_h");
  if (failed(initialH))
    return failure();
  rec.initialH = *initialH;
  FailureOr<Value> initialC = readInitial(initialCIndex, "initial_c");
  if (failed(initialC))
    return failure();
  rec.initialC = *initialC;

  FailureOr<SmallVector<Activation>> activations =
      readActivations(n, defaults, rec.numDirections);
  if (failed(activations))
    return failure();
  rec.activations = std::move(*activations);
  if (n.hasAttr("clip")) {
    double clip = n.getFloat("clip", 0.0);
    if (!(clip > 0))
      return n.emitError() << "clip must be positive, got " << clip;
    rec.clip = clip;
  }
  return rec;
}

/// The per-direction weights and biases of direction `d`.
struct DirectionWeights {
  /// [numGates * hidden, hidden].
  Value r;
  /// The input projection of every time step plus the biases added to it:
  /// [seq, batch, numGates * hidden].
  Value projected;
  /// B's recurrence bias [numGates * hidden], or null.
  Value rb;
};

/// Projects X by W^T of direction `d` and adds Wb and Rb (or, for a GRU
/// with linear_before_reset, Wb and the z and r parts of Rb).
static FailureOr<DirectionWeights>
readDirection(NodeImporter &n, const Recurrent &rec, int64_t d,
              bool keepHiddenRecurrenceBias) {
  DirectionWeights result;
  int64_t rows = rec.numGates * rec.hidden;
  SHARC_TRY(w, takeLeading(n, rec.w, d));
  SHARC_TRY(r, takeLeading(n, rec.r, d));
  result.r = *r;
  SHARC_TRY(flat, n.reshape(rec.x, {rec.seqLength * rec.batch, rec.inputSize}));
  SHARC_TRY(product, n.create<MatmulOp>(*flat, *w, false, true));
  Value projected = *product;
  if (rec.b) {
    SHARC_TRY(b, takeLeading(n, rec.b, d));
    SHARC_TRY(wb, takeLast(n, *b, 0, rows));
    SHARC_TRY(rb, takeLast(n, *b, rows, rows));
    result.rb = *rb;
    Value bias;
    if (keepHiddenRecurrenceBias) {
      // The h part of Rb is added after the reset gate (GRU).
      SHARC_TRY(rbZr, takeLast(n, *rb, 0, 2 * rec.hidden));
      SHARC_TRY(zeros,
                n.broadcast(n.scalar(rec.elementType, 0.0), {rec.hidden}));
      SHARC_TRY(padded, n.create<ConcatOp>(ValueRange{*rbZr, *zeros}, 0));
      SHARC_TRY(sum, n.create<AddOp>(*wb, *padded));
      bias = *sum;
    } else {
      SHARC_TRY(sum, n.create<AddOp>(*wb, *rb));
      bias = *sum;
    }
    SHARC_TRY(biased, n.create<AddOp>(projected, bias));
    projected = *biased;
  }
  SHARC_TRY(shaped, n.reshape(projected, {rec.seqLength, rec.batch, rows}));
  result.projected = *shaped;
  return result;
}

/// One time step: the input projection of the step and the states before
/// it (h, and c for an LSTM) to the states after it.
using StepFn = std::function<FailureOr<SmallVector<Value>>(
    Value projected, ArrayRef<Value> states)>;

/// The initial state `initial` of direction `d`, or zeros.
static FailureOr<Value> initialState(NodeImporter &n, const Recurrent &rec,
                                     Value initial, int64_t d) {
  if (initial)
    return takeLeading(n, initial, d);
  return n.broadcast(n.scalar(rec.elementType, 0.0), {rec.batch, rec.hidden});
}

/// Unrolls `step` over the time steps of direction `d` from `states`: the
/// hidden states of the steps by time index (zeros past sequence_lens) and
/// the final states.
static LogicalResult unroll(NodeImporter &n, const Recurrent &rec,
                            const DirectionWeights &weights, bool reverse,
                            const StepFn &step, SmallVector<Value> &states,
                            SmallVector<Value> &outputs) {
  outputs.assign(rec.seqLength, Value());
  Value zeros;
  for (int64_t i = 0; i < rec.seqLength; ++i) {
    int64_t t = reverse ? rec.seqLength - 1 - i : i;
    FailureOr<Value> projected = takeLeading(n, weights.projected, t);
    if (failed(projected))
      return failure();
    FailureOr<SmallVector<Value>> next = step(*projected, states);
    if (failed(next))
      return failure();
    if (!rec.lengths) {
      states = std::move(*next);
      outputs[t] = states.front();
      continue;
    }
    Type lengthType = elementTypeOf(rec.lengths);
    FailureOr<Value> valid = n.create<CompareOp>(
        n.scalar(lengthType, t), rec.lengths, ComparePredicate::lt);
    if (failed(valid))
      return failure();
    for (auto [state, updated] : llvm::zip(states, *next)) {
      FailureOr<Value> kept = n.create<SelectOp>(*valid, updated, state);
      if (failed(kept))
        return failure();
      state = *kept;
    }
    if (!zeros)
      zeros = n.scalar(rec.elementType, 0.0);
    FailureOr<Value> output = n.create<SelectOp>(*valid, next->front(), zeros);
    if (failed(output))
      return failure();
    outputs[t] = *output;
  }
  return success();
}

/// Stacks [batch, hidden] values along a new leading dimension.
static FailureOr<Value> stack(NodeImporter &n, ArrayRef<Value> values) {
  SmallVector<Value> rows;
  for (Value value : values) {
    SmallVector<int64_t> shape = {1};
    llvm::append_range(shape, shapeOf(value));
    FailureOr<Value> row = n.reshape(value, shape);
    if (failed(row))
      return failure();
    rows.push_back(*row);
  }
  if (rows.size() == 1)
    return rows.front();
  return n.create<ConcatOp>(ValueRange(rows), 0);
}

/// Runs every direction with `makeStep(d)` and assembles the requested
/// outputs: Y, then the final value of each state (Y_h, Y_c).
static FailureOr<Results>
runDirections(NodeImporter &n, const Recurrent &rec,
              bool keepHiddenRecurrenceBias,
              const std::function<FailureOr<StepFn>(
                  int64_t d, const DirectionWeights &weights)> &makeStep) {
  unsigned numStates = rec.cell == Cell::lstm ? 2 : 1;
  // outputs[d][t]; finals[k][d].
  SmallVector<SmallVector<Value>> outputs(rec.numDirections);
  SmallVector<SmallVector<Value>> finals(numStates);
  for (int64_t d = 0; d < rec.numDirections; ++d) {
    FailureOr<DirectionWeights> weights =
        readDirection(n, rec, d, keepHiddenRecurrenceBias);
    if (failed(weights))
      return failure();
    SmallVector<Value> states;
    Value initials[] = {rec.initialH, rec.initialC};
    for (unsigned k = 0; k < numStates; ++k) {
      FailureOr<Value> state = initialState(n, rec, initials[k], d);
      if (failed(state))
        return failure();
      states.push_back(*state);
    }
    bool reverse = rec.reverse || d == 1;
    FailureOr<StepFn> step = makeStep(d, *weights);
    if (failed(step))
      return failure();
    if (failed(unroll(n, rec, *weights, reverse, *step, states, outputs[d])))
      return failure();
    // An entry of sequence length 0 has zero final states (as in
    // onnxruntime), not its initial ones.
    Value nonEmpty;
    if (rec.lengths) {
      FailureOr<Value> positive = n.create<CompareOp>(
          rec.lengths, n.scalar(elementTypeOf(rec.lengths), 0),
          ComparePredicate::gt);
      if (failed(positive))
        return failure();
      nonEmpty = *positive;
    }
    for (unsigned k = 0; k < numStates; ++k) {
      Value state = states[k];
      if (nonEmpty) {
        FailureOr<Value> kept =
            n.create<SelectOp>(nonEmpty, state, n.scalar(rec.elementType, 0.0));
        if (failed(kept))
          return failure();
        state = *kept;
      }
      finals[k].push_back(state);
    }
  }

  Results results(1 + numStates);
  if (n.hasOutput(0)) {
    // [seq, numDirections, batch, hidden].
    SmallVector<Value> steps;
    for (int64_t t = 0; t < rec.seqLength; ++t) {
      SmallVector<Value> perDirection;
      for (int64_t d = 0; d < rec.numDirections; ++d)
        perDirection.push_back(outputs[d][t]);
      FailureOr<Value> step = stack(n, perDirection);
      if (failed(step))
        return failure();
      steps.push_back(*step);
    }
    FailureOr<Value> y = stack(n, steps);
    if (failed(y))
      return failure();
    if (rec.batchMajor)
      y = n.create<TransposeOp>(*y, ArrayRef<int64_t>{2, 0, 1, 3});
    if (failed(y))
      return failure();
    results[0] = *y;
  }
  for (unsigned k = 0; k < numStates; ++k) {
    if (!n.hasOutput(1 + k))
      continue;
    FailureOr<Value> state = stack(n, finals[k]);
    if (failed(state))
      return failure();
    if (rec.batchMajor)
      state = n.create<TransposeOp>(*state, ArrayRef<int64_t>{1, 0, 2});
    if (failed(state))
      return failure();
    results[1 + k] = *state;
  }
  return results;
}

/// Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb).
FailureOr<Results> sharc::onnx_import::importRNN(NodeImporter &n) {
  FailureOr<Recurrent> rec = readRecurrent(n, Cell::rnn, {"Tanh"}, 0);
  if (failed(rec))
    return failure();
  return runDirections(
      n, *rec, false,
      [&](int64_t d, const DirectionWeights &weights) -> FailureOr<StepFn> {
        const Activation &f = rec->activations[d];
        Value r = weights.r;
        return StepFn([&n, &rec, &f, r](Value projected, ArrayRef<Value> states)
                          -> FailureOr<SmallVector<Value>> {
          SHARC_TRY(recurrent, n.create<MatmulOp>(states[0], r, false, true));
          SHARC_TRY(sum, n.create<AddOp>(projected, *recurrent));
          SHARC_TRY(h, activateClipped(n, *rec, f, *sum));
          return SmallVector<Value>{*h};
        });
      });
}

/// zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz)
/// rt = f(Xt Wr^T + Ht-1 Rr^T + Wbr + Rbr)
/// ht = g(Xt Wh^T + (rt . Ht-1) Rh^T + Rbh + Wbh), or with
///      linear_before_reset g(Xt Wh^T + rt . (Ht-1 Rh^T + Rbh) + Wbh)
/// Ht = (1 - zt) . ht + zt . Ht-1
FailureOr<Results> sharc::onnx_import::importGRU(NodeImporter &n) {
  FailureOr<Recurrent> rec =
      readRecurrent(n, Cell::gru, {"Sigmoid", "Tanh"}, 0);
  if (failed(rec))
    return failure();
  bool linearBeforeReset = n.getInt("linear_before_reset", 0) != 0;
  int64_t hidden = rec->hidden;
  return runDirections(
      n, *rec, linearBeforeReset,
      [&](int64_t d, const DirectionWeights &weights) -> FailureOr<StepFn> {
        const Activation &f = rec->activations[2 * d];
        const Activation &g = rec->activations[2 * d + 1];
        // Ht-1 R^T takes all three gates' rows with linear_before_reset
        // (the h part is reset after the product), else those of z and r.
        Value rRows = weights.r, rh, rbh;
        if (linearBeforeReset) {
          if (weights.rb) {
            SHARC_TRY(bias, takeLast(n, weights.rb, 2 * hidden, hidden));
            rbh = *bias;
          }
        } else {
          SHARC_TRY(zr, sliceAlong(n, weights.r, 0, 0, 2 * hidden));
          SHARC_TRY(hRows, sliceAlong(n, weights.r, 0, 2 * hidden, hidden));
          rRows = *zr;
          rh = *hRows;
        }
        return StepFn(
            [&n, &rec, &f, &g, rRows, rh, rbh, hidden, linearBeforeReset](
                Value projected,
                ArrayRef<Value> states) -> FailureOr<SmallVector<Value>> {
              Value h = states[0];
              Type type = elementTypeOf(h);
              SHARC_TRY(xzr, takeLast(n, projected, 0, 2 * hidden));
              SHARC_TRY(xh, takeLast(n, projected, 2 * hidden, hidden));
              SHARC_TRY(recurrent, n.create<MatmulOp>(h, rRows, false, true));
              SHARC_TRY(hzr, takeLast(n, *recurrent, 0, 2 * hidden));
              SHARC_TRY(zrSum, n.create<AddOp>(*xzr, *hzr));
              SHARC_TRY(zIn, takeLast(n, *zrSum, 0, hidden));
              SHARC_TRY(rIn, takeLast(n, *zrSum, hidden, hidden));
              SHARC_TRY(z, activateClipped(n, *rec, f, *zIn));
              SHARC_TRY(reset, activateClipped(n, *rec, f, *rIn));
              Value candidateIn;
              if (linearBeforeReset) {
                SHARC_TRY(hh, takeLast(n, *recurrent, 2 * hidden, hidden));
                Value hhBiased = *hh;
                if (rbh) {
                  SHARC_TRY(sum, n.create<AddOp>(*hh, rbh));
                  hhBiased = *sum;
                }
                SHARC_TRY(gated, n.create<MulOp>(*reset, hhBiased));
                SHARC_TRY(sum, n.create<AddOp>(*xh, *gated));
                candidateIn = *sum;
              } else {
                SHARC_TRY(gated, n.create<MulOp>(*reset, h));
                SHARC_TRY(product, n.create<MatmulOp>(*gated, rh, false, true));
                SHARC_TRY(sum, n.create<AddOp>(*xh, *product));
                candidateIn = *sum;
              }
              SHARC_TRY(candidate, activateClipped(n, *rec, g, candidateIn));
              SHARC_TRY(keep, n.create<SubOp>(n.scalar(type, 1.0), *z));
              SHARC_TRY(fresh, n.create<MulOp>(*keep, *candidate));
              SHARC_TRY(old, n.create<MulOp>(*z, h));
              SHARC_TRY(next, n.create<AddOp>(*fresh, *old));
              return SmallVector<Value>{*next};
            });
      });
}

/// it = f(Xt Wi^T + Ht-1 Ri^T + Pi . Ct-1 + Wbi + Rbi)
/// ft = f(Xt Wf^T + Ht-1 Rf^T + Pf . Ct-1 + Wbf + Rbf) (1 - it with
///      input_forget)
/// ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc)
/// Ct = ft . Ct-1 + it . ct
/// ot = f(Xt Wo^T + Ht-1 Ro^T + Po . Ct + Wbo + Rbo)
/// Ht = ot . h(Ct)
/// The clip applies to the inputs of the gates' activations (f and g), as
/// in onnxruntime.
FailureOr<Results> sharc::onnx_import::importLSTM(NodeImporter &n) {
  FailureOr<Recurrent> rec =
      readRecurrent(n, Cell::lstm, {"Sigmoid", "Tanh", "Tanh"}, 6);
  if (failed(rec))
    return failure();
  bool inputForget = n.getInt("input_forget", 0) != 0;
  int64_t hidden = rec->hidden;
  // Pi, Po, Pf of each direction (null without P).
  SmallVector<std::array<Value, 3>> peepholes(rec->numDirections);
  if (n.hasInput(7)) {
    Value p = n.input(7);
    if (failed(requireElementType(n, *rec, p, "P")) ||
        failed(requireShape(n, p, {rec->numDirections, 3 * hidden}, "P")))
      return failure();
    for (int64_t d = 0; d < rec->numDirections; ++d) {
      SHARC_TRY(direction, takeLeading(n, p, d));
      for (int64_t k = 0; k < 3; ++k) {
        SHARC_TRY(part, takeLast(n, *direction, k * hidden, hidden));
        peepholes[d][k] = *part;
      }
    }
  }
  return runDirections(
      n, *rec, false,
      [&](int64_t d, const DirectionWeights &weights) -> FailureOr<StepFn> {
        const Activation &f = rec->activations[3 * d];
        const Activation &g = rec->activations[3 * d + 1];
        const Activation &h = rec->activations[3 * d + 2];
        Value r = weights.r;
        auto [pi, po, pf] = peepholes[d];
        return StepFn([&n, &rec, &f, &g, &h, r, pi, po, pf, hidden,
                       inputForget](Value projected, ArrayRef<Value> states)
                          -> FailureOr<SmallVector<Value>> {
          Value hPrev = states[0], cPrev = states[1];
          Type type = elementTypeOf(hPrev);
          SHARC_TRY(recurrent, n.create<MatmulOp>(hPrev, r, false, true));
          SHARC_TRY(gates, n.create<AddOp>(projected, *recurrent));
          auto gate = [&](int64_t index, Value peephole,
                          Value cell) -> FailureOr<Value> {
            SHARC_TRY(in, takeLast(n, *gates, index * hidden, hidden));
            if (!peephole)
              return *in;
            SHARC_TRY(product, n.create<MulOp>(peephole, cell));
            return n.create<AddOp>(*in, *product);
          };
          SHARC_TRY(iIn, gate(0, pi, cPrev));
          SHARC_TRY(i, activateClipped(n, *rec, f, *iIn));
          FailureOr<Value> forget = failure();
          if (inputForget) {
            forget = n.create<SubOp>(n.scalar(type, 1.0), *i);
          } else {
            SHARC_TRY(fIn, gate(2, pf, cPrev));
            forget = activateClipped(n, *rec, f, *fIn);
          }
          if (failed(forget))
            return failure();
          SHARC_TRY(cIn, gate(3, Value(), Value()));
          SHARC_TRY(c, activateClipped(n, *rec, g, *cIn));
          SHARC_TRY(kept, n.create<MulOp>(*forget, cPrev));
          SHARC_TRY(added, n.create<MulOp>(*i, *c));
          SHARC_TRY(cNext, n.create<AddOp>(*kept, *added));
          SHARC_TRY(oIn, gate(1, po, *cNext));
          SHARC_TRY(o, activateClipped(n, *rec, f, *oIn));
          SHARC_TRY(hc, activate(n, h, *cNext));
          SHARC_TRY(hNext, n.create<MulOp>(*o, *hc));
          return SmallVector<Value>{*hNext, *cNext};
        });
      });
}
