//===- OptimizerTest.cpp - one training step of each optimizer ------------===//
//
// Builds @train_step around a hand-written gradient function and checks one
// step against the optimizers written out here in f32 arithmetic, as
// DeepSpeed's FusedAdam kernel (AdamW, Adam) and torch.optim.SGD compute
// them, with micro-batch accumulation and global-norm clipping.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

#include <cmath>

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

float f32(double x) { return static_cast<float>(x); }

/// The state of the toy model: parameters w (3) and b (1) as one vector of
/// four, the frozen c, per-parameter state, the data of every micro-batch.
struct Problem {
  std::vector<float> params{0.5f, -1.25f, 2.0f, 0.75f};
  std::vector<float> frozen{0.125f, -0.5f, 1.0f};
  std::vector<float> state0{0.03f, -0.02f, 0.01f, 0.05f};
  std::vector<float> state1{0.004f, 0.001f, 0.002f, 0.003f};
  int64_t step = 3;
  /// Rows of x, two per micro-batch.
  std::vector<std::array<float, 3>> rows{{0.5f, -1.0f, 2.0f},
                                         {1.5f, 0.25f, -0.75f},
                                         {-2.0f, 3.0f, 0.5f},
                                         {0.125f, -0.5f, 1.25f}};
};

/// The global L2 norm of the gradients of w (3) and b (1): squares summed in
/// f32 per tensor, the sums and the root in f64.
double referenceNorm(const std::vector<float> &grads) {
  double squaresW = 0;
  for (int j = 0; j < 3; ++j)
    squaresW += grads[j] * grads[j];
  return std::sqrt(static_cast<double>(f32(squaresW)) +
                   static_cast<double>(grads[3] * grads[3]));
}

/// The loss mean and the accumulated, clipped gradients of `problem` with
/// `microBatches` micro-batches of two rows, each op rounded to f32.
std::pair<float, std::vector<float>>
referenceGradients(const Problem &p, int microBatches, double clip) {
  float seed = f32(1.0 / microBatches);
  float lossSum = 0;
  std::vector<float> grads(4, 0);
  for (int k = 0; k < microBatches; ++k) {
    double s = 0;
    for (int r = 2 * k; r < 2 * k + 2; ++r)
      for (int j = 0; j < 3; ++j)
        s += p.rows[r][j] * (p.params[j] + p.frozen[j]);
    float loss = f32(s) + p.params[3] * p.params[3];
    lossSum = k ? lossSum + loss : loss;
    for (int j = 0; j < 3; ++j) {
      float g =
          f32(static_cast<double>(p.rows[2 * k][j]) + p.rows[2 * k + 1][j]) *
          seed;
      grads[j] = k ? grads[j] + g : g;
    }
    float gb = (p.params[3] + p.params[3]) * seed;
    grads[3] = k ? grads[3] + gb : gb;
  }
  float loss = microBatches > 1 ? lossSum / f32(microBatches) : lossSum;
  if (clip > 0) {
    double norm = referenceNorm(grads);
    double coefficient = 1.0 / std::max(1.0, (norm + 1e-6) / clip);
    for (float &g : grads)
      g = g * f32(coefficient);
  }
  return {loss, grads};
}

class OptimizerTest : public IRTest {
protected:
  /// Builds the step, runs it on `problem` and returns its results.
  std::vector<Tensor> runStep(const TrainingOptions &options,
                              const Problem &p) {
    if (!parse(toyGradModel("f32"), "main_grad"))
      return {};
    FailureOr<func::FuncOp> step = buildTrainStep(*modules.back(), options);
    if (failed(step)) {
      ADD_FAILURE() << "buildTrainStep failed:\n" << diagnostics;
      return {};
    }
    std::vector<Tensor> args{
        makeTensor(DType::f32, {3}, {p.params[0], p.params[1], p.params[2]}),
        makeTensor(DType::f32, {3}, {p.frozen[0], p.frozen[1], p.frozen[2]}),
        makeTensor(DType::f32, {}, {p.params[3]})};
    unsigned states = step->getNumArguments() - 5;
    for (unsigned param = 0; param < 2; ++param)
      for (unsigned s = 0; s < states / 2; ++s) {
        const std::vector<float> &state = s ? p.state1 : p.state0;
        args.push_back(param ? makeTensor(DType::f32, {}, {state[3]})
                             : makeTensor(DType::f32, {3},
                                          {state[0], state[1], state[2]}));
      }
    args.push_back(makeTensor(DType::i64, {}, {double(p.step)}));
    int64_t rows = 2 * options.gradAccum;
    std::vector<double> x;
    for (int64_t r = 0; r < rows; ++r)
      x.insert(x.end(), p.rows[r].begin(), p.rows[r].end());
    args.push_back(makeTensor(DType::f32, {rows, 3}, x));
    FailureOr<std::vector<Tensor>> results = evaluate(*step, args);
    if (failed(results)) {
      ADD_FAILURE() << "evaluation failed:\n" << diagnostics;
      return {};
    }
    // The step returns the norm of the gradients before clipping.
    expectedNorm =
        referenceNorm(referenceGradients(p, options.gradAccum, 0).second);
    return *results;
  }

  double expectedNorm = 0;

  /// Expects `results` (loss, w, b, state..., step, lr, grad_norm) to hold
  /// `loss`, `params` (w then b), `state` (per parameter, per role) and the
  /// norm of the unclipped gradients.
  void expectResults(const std::vector<Tensor> &results, float loss,
                     const std::vector<float> &params,
                     const std::vector<std::vector<float>> &state,
                     const Problem &p, double lr) {
    ASSERT_EQ(results.size(), 6 + 2 * state.size());
    auto expectParam = [&](const Tensor &w, const Tensor &b,
                           const std::vector<float> &values, const char *what) {
      for (int j = 0; j < 3; ++j)
        EXPECT_FLOAT_EQ(w.getDouble(j), values[j]) << what << " " << j;
      EXPECT_FLOAT_EQ(b.getDouble(0), values[3]) << what << " b";
    };
    EXPECT_FLOAT_EQ(results[0].getDouble(0), loss);
    expectParam(results[1], results[2], params, "param");
    for (size_t s = 0; s < state.size(); ++s)
      expectParam(results[3 + s], results[3 + state.size() + s], state[s],
                  "state");
    EXPECT_EQ(results[results.size() - 3].getInt(0), p.step + 1);
    EXPECT_EQ(results[results.size() - 2].getDouble(0), lr);
    EXPECT_NEAR(results.back().getDouble(0), expectedNorm, 1e-6 * expectedNorm);
  }
};

/// FusedAdam's kernel in f32: decoupled (AdamW) or L2 weight decay.
void referenceAdam(const TrainingOptions &o, const Problem &p,
                   const std::vector<float> &grads, std::vector<float> &params,
                   std::vector<float> &m, std::vector<float> &v) {
  float beta1 = f32(o.beta1), beta2 = f32(o.beta2);
  float correction1 = 1, correction2 = 1;
  if (o.biasCorrection) {
    correction1 = f32(1 - std::pow(o.beta1, p.step + 1));
    correction2 = f32(1 - std::pow(o.beta2, p.step + 1));
  }
  bool decoupled = o.optimizer == OptimizerKind::adamw || o.adamWMode;
  float decay = f32(o.weightDecay), lr = f32(o.lr), eps = f32(o.eps);
  params = p.params;
  m = p.state0;
  v = p.state1;
  for (int i = 0; i < 4; ++i) {
    float g = grads[i];
    if (!decoupled)
      g = g + decay * params[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    float mHat = m[i] / correction1;
    float vHat = v[i] / correction2;
    float update = mHat / (std::sqrt(vHat) + eps);
    if (decoupled)
      update = update + decay * params[i];
    params[i] = params[i] - lr * update;
  }
}

TrainingOptions adamOptions(OptimizerKind kind) {
  TrainingOptions o;
  o.optimizer = kind;
  o.lr = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weightDecay = 0.1;
  return o;
}

TEST_F(OptimizerTest, AdamW) {
  Problem p;
  TrainingOptions o = adamOptions(OptimizerKind::adamw);
  auto [loss, grads] = referenceGradients(p, 1, 0);
  std::vector<float> params, m, v;
  referenceAdam(o, p, grads, params, m, v);
  expectResults(runStep(o, p), loss, params, {m, v}, p, 0.01);
}

TEST_F(OptimizerTest, AdamL2) {
  Problem p;
  TrainingOptions o = adamOptions(OptimizerKind::adam);
  o.adamWMode = false;
  auto [loss, grads] = referenceGradients(p, 1, 0);
  std::vector<float> params, m, v;
  referenceAdam(o, p, grads, params, m, v);
  expectResults(runStep(o, p), loss, params, {m, v}, p, 0.01);
}

TEST_F(OptimizerTest, AdamWithoutBiasCorrection) {
  Problem p;
  p.step = 0;
  TrainingOptions o = adamOptions(OptimizerKind::adam);
  o.biasCorrection = false;
  auto [loss, grads] = referenceGradients(p, 1, 0);
  std::vector<float> params, m, v;
  referenceAdam(o, p, grads, params, m, v);
  expectResults(runStep(o, p), loss, params, {m, v}, p, 0.01);
}

TEST_F(OptimizerTest, AdamWAccumulatedAndClipped) {
  Problem p;
  TrainingOptions o = adamOptions(OptimizerKind::adamw);
  o.gradAccum = 2;
  o.clip = 0.5;
  auto [loss, grads] = referenceGradients(p, 2, 0.5);
  std::vector<float> params, m, v;
  referenceAdam(o, p, grads, params, m, v);
  expectResults(runStep(o, p), loss, params, {m, v}, p, 0.01);
}

/// torch.optim.SGD with dampening 0: L2 decay on the gradient, then the
/// momentum buffer, optionally Nesterov's look-ahead.
void referenceSgd(const TrainingOptions &o, const Problem &p,
                  const std::vector<float> &grads, std::vector<float> &params,
                  std::vector<float> &buffer) {
  float lr = f32(o.lr), momentum = f32(o.momentum), decay = f32(o.weightDecay);
  params = p.params;
  buffer = p.state0;
  for (int i = 0; i < 4; ++i) {
    float g = grads[i];
    if (o.weightDecay != 0)
      g = g + decay * params[i];
    if (o.momentum != 0) {
      buffer[i] = momentum * buffer[i] + g;
      g = o.nesterov ? g + momentum * buffer[i] : buffer[i];
    }
    params[i] = params[i] - lr * g;
  }
}

TEST_F(OptimizerTest, Sgd) {
  for (auto [momentum, nesterov] :
       {std::pair<double, bool>{0.0, false}, {0.9, false}, {0.9, true}}) {
    SCOPED_TRACE(std::to_string(momentum) + (nesterov ? " nesterov" : ""));
    Problem p;
    TrainingOptions o;
    o.optimizer = OptimizerKind::sgd;
    o.lr = 0.05;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weightDecay = 0.01;
    o.gradAccum = 2;
    auto [loss, grads] = referenceGradients(p, 2, 0);
    std::vector<float> params, buffer;
    referenceSgd(o, p, grads, params, buffer);
    std::vector<std::vector<float>> state;
    if (momentum != 0)
      state.push_back(buffer);
    expectResults(runStep(o, p), loss, params, state, p, 0.05);
  }
}

TEST_F(OptimizerTest, ClipBelowThresholdKeepsGradients) {
  Problem p;
  TrainingOptions o;
  o.optimizer = OptimizerKind::sgd;
  o.lr = 0.5;
  o.clip = 100;
  auto [loss, grads] = referenceGradients(p, 1, 0);
  std::vector<float> params, buffer;
  referenceSgd(o, p, grads, params, buffer);
  expectResults(runStep(o, p), loss, params, {}, p, 0.5);
}

TEST_F(OptimizerTest, Signature) {
  Problem p;
  TrainingOptions o;
  func::FuncOp grad = parse(toyGradModel("f32"), "main_grad");
  ASSERT_TRUE(grad);
  o.gradAccum = 3;
  FailureOr<func::FuncOp> step = buildTrainStep(*modules.back(), o);
  ASSERT_TRUE(succeeded(step)) << diagnostics;
  auto state = [&](unsigned index, bool result) {
    auto attr = result ? step->getResultAttrOfType<StateAttr>(
                             index, SharcDialect::getStateAttrName())
                       : step->getArgAttrOfType<StateAttr>(
                             index, SharcDialect::getStateAttrName());
    return attr ? (attr.getParam() + "." + attr.getRole()).str()
                : std::string();
  };
  EXPECT_EQ(state(3, false), "w.exp_avg");
  EXPECT_EQ(state(4, false), "w.exp_avg_sq");
  EXPECT_EQ(state(5, false), "b.exp_avg");
  EXPECT_EQ(state(6, false), "b.exp_avg_sq");
  EXPECT_EQ(state(7, false), ".step");
  EXPECT_EQ(step->getArgumentTypes()[8],
            RankedTensorType::get({6, 3}, Float32Type::get(&context)));
  EXPECT_EQ(getParamAttr(*step, 1).getName(), "c");
  EXPECT_EQ(step->getNumResults(), 10u);
  EXPECT_EQ(state(3, true), "w.exp_avg");
  EXPECT_EQ(state(7, true), ".step");
  EXPECT_EQ(
      step->getResultAttrOfType<ParamAttr>(2, SharcDialect::getParamAttrName())
          .getName(),
      "b");
  EXPECT_EQ(step->getResultAttrOfType<StringAttr>(
                    8, SharcDialect::getOutputAttrName())
                .getValue(),
            "lr");
  EXPECT_EQ(step->getResultAttrOfType<StringAttr>(
                    9, SharcDialect::getOutputAttrName())
                .getValue(),
            "grad_norm");
}

/// The training step calls the gradient function: func.call runs its callee
/// as the same rank of the same group, so collectives inside work.
class EvaluatorCallTest : public IRTest {};

TEST_F(EvaluatorCallTest, CalleeRunsAsTheSameRank) {
  constexpr const char *text = R"mlir(
func.func private @sum(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = sharc.all_reduce %x {kind = #sharc.collective_kind<sum>, ranks = 2}
      : tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = call @sum(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = sharc.mul %0, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
)mlir";
  func::FuncOp main = parse(text);
  ASSERT_TRUE(main);
  FailureOr<std::vector<std::vector<Tensor>>> results =
      evaluateRanks(main, {{makeTensor(DType::f32, {2}, {1, 2})},
                           {makeTensor(DType::f32, {2}, {10, 20})}});
  ASSERT_TRUE(succeeded(results)) << diagnostics;
  expectClose((*results)[0][0], {11, 22}, 0);
  expectClose((*results)[1][1], {110, 440}, 0);
}

TEST_F(EvaluatorCallTest, ExternalCallee) {
  constexpr const char *text = R"mlir(
func.func private @external(%x: tensor<2xf32>) -> tensor<2xf32>
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = call @external(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
)mlir";
  std::string errors = runFailing(text, {makeTensor(DType::f32, {2}, {1, 2})});
  EXPECT_NE(errors.find("cannot evaluate a function without a body"),
            std::string::npos)
      << errors;
}

/// buildTrainPipeline on a forward function: autodiff, then the step.
TEST_F(OptimizerTest, Pipeline) {
  constexpr const char *forward = R"mlir(
func.func @main(
    %x: tensor<2x3xf32> {sharc.input = "x"},
    %w: tensor<3x1xf32> {sharc.param = #sharc.param<"w", "fc.weight">},
    %y: tensor<2x1xf32> {sharc.input = "y"})
    -> (tensor<f32> {sharc.output = "loss"}) {
  %0 = sharc.matmul %x, %w
      : (tensor<2x3xf32>, tensor<3x1xf32>) -> tensor<2x1xf32>
  %1 = sharc.sub %0, %y : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %2 = sharc.mul %1, %1 : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %3 = sharc.reduce %2
      {kind = #sharc.reduce_kind<mean>, axes = array<i64: 0, 1>}
      : (tensor<2x1xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}
)mlir";
  ASSERT_TRUE(parse(forward));
  TrainingOptions o;
  o.optimizer = OptimizerKind::sgd;
  o.lr = 0.05;
  o.gradAccum = 2;
  PassManager pm(&context);
  buildTrainPipeline(pm, o);
  ASSERT_TRUE(succeeded(pm.run(*modules.back()))) << diagnostics;
  auto step = modules.back()->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);

  const double w[3] = {0.5, -1.0, 0.25};
  const double x[4][3] = {{1, 2, 3}, {-1, 0.5, 2}, {0.25, -2, 1}, {3, 1, -1}};
  const double y[4] = {1, -2, 0.5, 2};
  // Mean squared error per micro-batch of two rows; gradients of the losses
  // scaled by 1/2 and summed; loss the mean of the two.
  double grad[3] = {0, 0, 0}, loss = 0;
  for (int k = 0; k < 2; ++k)
    for (int r = 2 * k; r < 2 * k + 2; ++r) {
      double residual = x[r][0] * w[0] + x[r][1] * w[1] + x[r][2] * w[2] - y[r];
      loss += residual * residual / 2 / 2;
      for (int j = 0; j < 3; ++j)
        grad[j] += 0.5 * 2 * residual * x[r][j] / 2;
    }
  FailureOr<std::vector<Tensor>> results = evaluate(
      step, {makeTensor(DType::f32, {3, 1}, {w[0], w[1], w[2]}),
             makeTensor(DType::i64, {}, {0}),
             makeTensor(DType::f32, {4, 3},
                        {x[0][0], x[0][1], x[0][2], x[1][0], x[1][1], x[1][2],
                         x[2][0], x[2][1], x[2][2], x[3][0], x[3][1], x[3][2]}),
             makeTensor(DType::f32, {4, 1}, {y[0], y[1], y[2], y[3]})});
  ASSERT_TRUE(succeeded(results)) << diagnostics;
  ASSERT_EQ(results->size(), 5u);
  EXPECT_NEAR((*results)[0].getDouble(0), loss, 1e-5 * loss);
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR((*results)[1].getDouble(j), w[j] - 0.05 * grad[j], 1e-5)
        << "w " << j;
  EXPECT_EQ((*results)[2].getInt(0), 1);
  EXPECT_EQ((*results)[3].getDouble(0), 0.05);
  double norm =
      std::sqrt(grad[0] * grad[0] + grad[1] * grad[1] + grad[2] * grad[2]);
  EXPECT_NEAR((*results)[4].getDouble(0), norm, 1e-5 * norm);
}

} // namespace
