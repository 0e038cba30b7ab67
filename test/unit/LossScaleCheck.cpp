//===- LossScaleCheck.cpp - run the IR loss scaler on overflow sequences --===//
//
// sharc-loss-scale-check CASES.json: for each case
//   {"options": {"initial_scale": S, "window": W, "min_scale": M,
//                "hysteresis": H, "consecutive_hysteresis": B},
//    "sequences": [[overflow, ...], ...]}
// builds one update of the loss scaler (passes/LossScale.h) as a function,
// runs it on the evaluator step after step from the initial state, and prints
// per case, per sequence, per step the state after the step
// {"scale", "hysteresis", "iter", "last_overflow", "at_minimum"} as JSON.  A
// sequence stops at the first step at the minimum (DeepSpeed stops the run
// there).  test/e2e/test_loss_scaler.py compares it with DeepSpeed's
// DynamicLossScaler.
//
//===----------------------------------------------------------------------===//

#include "passes/LossScale.h"

#include "ir/Evaluator.h"
#include "ir/SharcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace sharc;
namespace json = llvm::json;

namespace {

int fail(const llvm::Twine &message) {
  llvm::errs() << "sharc-loss-scale-check: " << message << "\n";
  return 1;
}

/// @update(scale, hysteresis, iter, last_overflow, overflow) -> the next
/// state and at_minimum.
func::FuncOp buildUpdate(ModuleOp module, const LossScaleOptions &options) {
  MLIRContext *context = module.getContext();
  ImplicitLocOpBuilder b(UnknownLoc::get(context), module.getBody(),
                         module.getBody()->begin());
  auto scalar = [&](Type element) {
    return RankedTensorType::get({}, element);
  };
  Type f64 = scalar(b.getF64Type()), i64 = scalar(b.getI64Type()),
       i1 = scalar(b.getI1Type());
  auto func = func::FuncOp::create(
      b, "update",
      b.getFunctionType({f64, i64, i64, i64, i1}, {f64, i64, i64, i64, i1}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  MathBuilder math(b);
  LossScaleState state{entry->getArgument(0), entry->getArgument(1),
                       entry->getArgument(2), entry->getArgument(3)};
  LossScaleUpdate update =
      buildLossScaleUpdate(math, state, entry->getArgument(4), options);
  func::ReturnOp::create(
      b, ValueRange{update.next.scale, update.next.hysteresis, update.next.iter,
                    update.next.lastOverflow, update.atMinimum});
  return func;
}

Tensor scalarTensor(DType type, double value) {
  Tensor tensor(type, {});
  tensor.setDouble(0, value);
  return tensor;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2)
    return fail("usage: sharc-loss-scale-check CASES.json");
  auto buffer = llvm::MemoryBuffer::getFile(argv[1]);
  if (!buffer)
    return fail(llvm::Twine("cannot read ") + argv[1]);
  llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()));
  const json::Array *cases = parsed->getAsArray();
  if (!cases)
    return fail("expected an array of cases");

  MLIRContext context;
  context.loadDialect<SharcDialect, func::FuncDialect>();
  json::Array output;
  for (const json::Value &item : *cases) {
    const json::Object *object = item.getAsObject();
    const json::Object *settings =
        object ? object->getObject("options") : nullptr;
    const json::Array *sequences =
        object ? object->getArray("sequences") : nullptr;
    if (!settings || !sequences)
      return fail("a case needs 'options' and 'sequences'");
    LossScaleOptions options;
    options.initialScale = settings->getNumber("initial_scale").value_or(0);
    options.window = settings->getInteger("window").value_or(0);
    options.minScale = settings->getNumber("min_scale").value_or(0);
    options.hysteresis = settings->getInteger("hysteresis").value_or(0);
    options.consecutiveHysteresis =
        settings->getBoolean("consecutive_hysteresis").value_or(false);
    if (options.window < 1 || options.hysteresis < 1)
      return fail("window and hysteresis must be at least 1");

    OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
    func::FuncOp update = buildUpdate(*module, options);
    if (failed(verify(*module)))
      return fail("the scaler's IR does not verify");
    json::Array caseOutput;
    for (const json::Value &sequence : *sequences) {
      const json::Array *flags = sequence.getAsArray();
      if (!flags)
        return fail("a sequence is an array of booleans");
      std::vector<Tensor> state = {
          scalarTensor(DType::f64, options.initialScale),
          scalarTensor(DType::i64, static_cast<double>(options.hysteresis)),
          scalarTensor(DType::i64, 0), scalarTensor(DType::i64, -1)};
      json::Array steps;
      for (const json::Value &flag : *flags) {
        std::vector<Tensor> args = state;
        args.push_back(
            scalarTensor(DType::i1, flag.getAsBoolean().value_or(false)));
        FailureOr<std::vector<Tensor>> results = evaluate(update, args);
        if (failed(results))
          return fail("evaluating the scaler failed");
        bool atMinimum = (*results)[4].getInt(0) != 0;
        steps.push_back(json::Object{{"scale", (*results)[0].getDouble(0)},
                                     {"hysteresis", (*results)[1].getInt(0)},
                                     {"iter", (*results)[2].getInt(0)},
                                     {"last_overflow", (*results)[3].getInt(0)},
                                     {"at_minimum", atMinimum}});
        if (atMinimum)
          break;
        state.assign(results->begin(), results->begin() + 4);
      }
      caseOutput.push_back(std::move(steps));
    }
    output.push_back(std::move(caseOutput));
  }
  llvm::outs() << json::Value(std::move(output)) << "\n";
  return 0;
}
