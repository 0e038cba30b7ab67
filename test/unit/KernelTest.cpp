//===- KernelTest.cpp - Generated kernels against the evaluator -----------===//
//
// Many small random functions (one op each, plus a few elementwise chains
// that sharc-fuse groups) on shapes such as 1, 3, 5, 17 and 33 are planned,
// emitted into one C++ file by emitFunctionLibrary, compiled once with the
// host compiler into a shared library and run; every output is compared with
// the reference evaluator: bitwise for data movement, integers, elementwise
// ops, fused chains and reductions; within a relative 1e-6 (f32) / 1e-12
// (f64) for losses, convolutions and GEMMs (BLAS and summation order).  The
// count of bitwise-equal float outputs is printed.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "codegen/Emitter.h"
#include "ir/SharcOps.h"
#include "passes/Passes.h"
#include "runtime/Program.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/Float16.h"

using namespace mlir;
using namespace sharc;
using namespace sharc::test;

namespace {

/// How the values of an argument are drawn.
enum class Gen {
  /// Uniform in [-2, 2).
  uniform,
  /// Uniform in [0.1, 3).
  positive,
  /// Small integers in [-2, 2] as floats, with an occasional NaN: ties and
  /// NaNs for max pooling.
  ties,
  /// Integers in [lo, hi).
  integer,
  /// Integers in [lo, hi) without 0.
  nonZero,
  /// Booleans.
  boolean,
};

struct Arg {
  std::string element;
  SmallVector<int64_t> shape;
  Gen gen = Gen::uniform;
  int64_t lo = -5, hi = 5;
};

struct Case {
  std::string name;
  std::vector<Arg> args;
  std::vector<std::string> results;
  /// The ops, in terms of %a0, %a1, ...; ends with `return`.
  std::string body;
  /// Float outputs: allowed error relative to |expected| (0: bitwise) plus
  /// `scaled` times the largest |expected| of the output.
  double relative = 0, scaled = 0;
};

std::string type(ArrayRef<int64_t> shape, StringRef element) {
  return tensorType(shape, element);
}

std::string ints(ArrayRef<int64_t> values) {
  return "array<i64: " +
         llvm::join(llvm::map_range(
                        values, [](int64_t v) { return std::to_string(v); }),
                    ", ") +
         ">";
}

DType dtypeFor(StringRef element) {
  if (element == "f32")
    return DType::f32;
  if (element == "f16")
    return DType::f16;
  if (element == "bf16")
    return DType::bf16;
  if (element == "f64")
    return DType::f64;
  if (element == "i32")
    return DType::i32;
  if (element == "i1")
    return DType::i1;
  return DType::i64;
}

size_t bytesOf(DType t) {
  if (t == DType::f16 || t == DType::bf16)
    return 2;
  return t == DType::f64 || t == DType::i64 ? 8 : t == DType::i1 ? 1 : 4;
}

/// Builds the random cases.
class CaseBuilder {
public:
  explicit CaseBuilder(unsigned seed) : rng(seed) {}

  std::vector<Case> cases;

  int64_t pick(std::initializer_list<int64_t> values) {
    return *(values.begin() + uniform(0, values.size() - 1));
  }
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool coin() { return uniform(0, 1) == 1; }
  int64_t size() { return pick({1, 2, 3, 4, 5, 7, 17, 33}); }
  SmallVector<int64_t> shape(int64_t rank, int64_t maxElements = 4096) {
    while (true) {
      SmallVector<int64_t> s;
      for (int64_t d = 0; d < rank; ++d)
        s.push_back(size());
      int64_t n = 1;
      for (int64_t d : s)
        n *= d;
      if (n <= maxElements)
        return s;
    }
  }
  std::string floatType() { return coin() ? "f32" : "f64"; }
  double floatTolerance(StringRef element) {
    // One unit in the last place of the 16-bit types: a double sum of
    // another order may round to the neighbour.
    if (element == "f16")
      return 1e-3;
    if (element == "bf16")
      return 8e-3;
    return element == "f32" ? 1e-6 : 1e-12;
  }
  /// Elementwise ops, fused chains and reductions compute exactly what the
  /// evaluator computes (f32 arithmetic in float is the evaluator's double
  /// rounded once; sums run in its order): compared bit for bit.
  static constexpr double kBitwise = 0;

  Case &add(std::string name, std::vector<Arg> args,
            std::vector<std::string> results, std::string body,
            double relative = 0) {
    Case c;
    c.name = name + "_" + std::to_string(cases.size());
    c.args = std::move(args);
    c.results = std::move(results);
    c.body = std::move(body);
    c.relative = relative;
    cases.push_back(std::move(c));
    return cases.back();
  }

  /// A shape that broadcasts to `to`: a suffix with some dimensions 1.
  SmallVector<int64_t> broadcastFrom(ArrayRef<int64_t> to) {
    size_t drop = uniform(0, to.size());
    SmallVector<int64_t> s(to.drop_front(drop));
    for (int64_t &d : s)
      if (coin())
        d = 1;
    return s;
  }

  /// f16 and bf16: every elementwise op, casts to and from them, a fused
  /// chain and data movement, all bit for bit (16-bit values are computed on
  /// as float and rounded once, runtime/Kernels.h).
  void halfPrecision() {
    for (StringRef e : {"f16", "bf16"}) {
      for (StringRef op :
           {"neg",  "abs",   "relu",    "exp",   "log",   "sqrt", "rsqrt",
            "erf",  "tanh",  "sigmoid", "sin",   "cos",   "asin", "acos",
            "atan", "asinh", "acosh",   "atanh", "floor", "gelu"}) {
        auto s = shape(uniform(1, 3));
        std::string t = type(s, e);
        Gen gen = op == "log" || op == "sqrt" || op == "rsqrt" ? Gen::positive
                                                               : Gen::uniform;
        add(op.str() + "_" + e.str(), {{e.str(), s, gen}}, {t},
            "%r = sharc." + op.str() + " %a0 : " + t + "\n return %r : " + t,
            kBitwise);
      }
      for (StringRef op : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
        auto out = shape(uniform(1, 3));
        auto rhs = broadcastFrom(out);
        std::string to = type(out, e), tb = type(rhs, e);
        Gen base = op == "pow" ? Gen::positive : Gen::uniform;
        add(op.str() + "_" + e.str(), {{e.str(), out, base}, {e.str(), rhs}},
            {to},
            "%r = sharc." + op.str() + " %a0, %a1 : (" + to + ", " + tb +
                ") -> " + to + "\n return %r : " + to,
            kBitwise);
      }
      // Casts in and out: f32, f64 and i64 sources, f32 and i64 results.
      for (StringRef from : {"f32", "f64", "i64"}) {
        auto s = shape(uniform(1, 3));
        std::string tf = type(s, from), tt = type(s, e);
        add("cast_" + from.str() + "_" + e.str(),
            {{from.str(), s, from == "i64" ? Gen::integer : Gen::uniform, -3000,
              3000}},
            {tt},
            "%r = sharc.cast %a0 : " + tf + " to " + tt +
                "\n return %r : " + tt,
            kBitwise);
      }
      for (StringRef to : {"f32", "i64"}) {
        auto s = shape(uniform(1, 3));
        std::string tf = type(s, e), tt = type(s, to);
        add("cast_" + e.str() + "_" + to.str(), {{e.str(), s}}, {tt},
            "%r = sharc.cast %a0 : " + tf + " to " + tt +
                "\n return %r : " + tt,
            kBitwise);
      }
      {
        // A fused chain with a literal, a comparison and a select.
        auto s = shape(2);
        std::string t = type(s, e), tb = type(s, "i1");
        std::string scalar = type({}, e);
        add("chain_" + e.str(), {{e.str(), s}, {e.str(), s}}, {t},
            "%c = sharc.constant dense<1.5> : " + scalar +
                "\n %0 = sharc.mul %a0, %a1 : (" + t + ", " + t + ") -> " + t +
                "\n %1 = sharc.add %0, %c : (" + t + ", " + scalar + ") -> " +
                t + "\n %2 = sharc.tanh %1 : " + t +
                "\n %3 = sharc.compare %2, %a0 {predicate = "
                "#sharc.predicate<gt>} : (" +
                t + ", " + t + ") -> " + tb +
                "\n %4 = sharc.select %3, %2, %1 : (" + tb + ", " + t + ", " +
                t + ") -> " + t + "\n return %4 : " + t,
            kBitwise);
      }
      {
        // Reductions sum in double and round once, as the evaluator.
        auto s = shape(3, 2048);
        std::string t = type(s, e);
        SmallVector<int64_t> kept = {s[0], s[2]};
        std::string tk = type(kept, e), ts = type({}, e);
        add("reduce_sum_" + e.str(), {{e.str(), s}}, {tk},
            "%r = sharc.reduce %a0 {kind = #sharc.reduce_kind<sum>, axes = "
            "array<i64: 1>} : (" +
                t + ") -> " + tk + "\n return %r : " + tk,
            kBitwise);
        add("reduce_mean_" + e.str(), {{e.str(), s}}, {ts},
            "%r = sharc.reduce %a0 {kind = #sharc.reduce_kind<mean>, axes = "
            "array<i64: 0, 1, 2>} : (" +
                t + ") -> " + ts + "\n return %r : " + ts,
            kBitwise);
      }
      {
        // GEMMs: 16-bit operands widened to f32, f32 accumulation, one
        // rounding; the evaluator runs the same f32 product, so a result may
        // differ only where the BLAS call is split differently (then by an
        // ulp of the 16-bit type).
        int64_t m = size(), k = size(), n = size();
        std::string ta = type({m, k}, e), tb = type({n, k}, e),
                    tc = type({m, n}, e);
        add("matmul_" + e.str(), {{e.str(), {m, k}}, {e.str(), {n, k}}}, {tc},
            "%r = sharc.matmul %a0, %a1 {transpose_rhs = true} : (" + ta +
                ", " + tb + ") -> " + tc + "\n return %r : " + tc,
            e == "f16" ? 1e-3 : 8e-3);
      }
      {
        // Data movement moves the 16-bit values as they are.
        auto s = shape(3, 512);
        std::string t = type(s, e);
        SmallVector<int64_t> transposed = {s[2], s[0], s[1]};
        std::string tt = type(transposed, e);
        add("transpose_" + e.str(), {{e.str(), s}}, {tt},
            "%r = sharc.transpose %a0 {permutation = array<i64: 2, 0, 1>} : (" +
                t + ") -> " + tt + "\n return %r : " + tt,
            kBitwise);
        SmallVector<int64_t> doubled = {2 * s[0], s[1], s[2]};
        std::string td = type(doubled, e);
        add("concat_" + e.str(), {{e.str(), s}, {e.str(), s}}, {td},
            "%r = sharc.concat %a0, %a1 {axis = 0 : i64} : (" + t + ", " + t +
                ") -> " + td + "\n return %r : " + td,
            kBitwise);
      }
    }
  }

  void elementwise() {
    for (StringRef op :
         {"neg",  "abs",   "relu",    "exp",   "log",   "sqrt", "rsqrt",
          "erf",  "tanh",  "sigmoid", "sin",   "cos",   "asin", "acos",
          "atan", "asinh", "acosh",   "atanh", "floor", "gelu", "gelu_tanh"}) {
      std::string e = floatType();
      auto s = shape(uniform(0, 3));
      std::string t = type(s, e);
      std::string opName = op == "gelu_tanh" ? "gelu" : op.str();
      std::string attr = op == "gelu_tanh" ? " {approximation = "
                                             "#sharc.gelu_approximation<tanh>}"
                                           : "";
      Gen gen = op == "log" || op == "sqrt" || op == "rsqrt" ? Gen::positive
                                                             : Gen::uniform;
      add(op.str(), {{e, s, gen}}, {t},
          "%r = sharc." + opName + " %a0" + attr + " : " + t +
              "\n return %r : " + t,
          kBitwise);
    }
    for (StringRef op : {"neg", "abs", "relu"}) {
      std::string e = coin() ? "i32" : "i64";
      auto s = shape(uniform(1, 3));
      std::string t = type(s, e);
      add(op.str() + "_" + e, {{e, s, Gen::integer, -100, 100}}, {t},
          "%r = sharc." + op.str() + " %a0 : " + t + "\n return %r : " + t);
    }
    for (StringRef op :
         {"add", "sub", "mul", "div", "pow", "max", "min", "add", "mul"}) {
      std::string e = floatType();
      auto out = shape(uniform(1, 4));
      auto lhs = coin() ? out : broadcastFrom(out);
      auto rhs = broadcastFrom(out);
      if (coin())
        std::swap(lhs, rhs);
      SmallVector<int64_t> result = out;
      // The result is the broadcast of both; make sure one operand is full.
      if (lhs.size() != out.size() && rhs.size() != out.size())
        lhs = out;
      else {
        // Recompute the broadcast result shape of lhs and rhs.
        size_t rank = std::max(lhs.size(), rhs.size());
        result.assign(rank, 1);
        for (size_t d = 0; d < rank; ++d) {
          int64_t a = d + lhs.size() >= rank ? lhs[d + lhs.size() - rank] : 1;
          int64_t b = d + rhs.size() >= rank ? rhs[d + rhs.size() - rank] : 1;
          result[d] = std::max(a, b);
        }
      }
      std::string tr = type(result, e), ta = type(lhs, e), tb = type(rhs, e);
      Gen base = op == "pow" ? Gen::positive : Gen::uniform;
      add(op.str(), {{e, lhs, base}, {e, rhs, Gen::uniform}}, {tr},
          "%r = sharc." + op.str() + " %a0, %a1 : (" + ta + ", " + tb +
              ") -> " + tr + "\n return %r : " + tr,
          kBitwise);
    }
    for (StringRef op : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
      std::string e = coin() ? "i32" : "i64";
      auto out = shape(uniform(1, 3));
      auto rhs = broadcastFrom(out);
      std::string to = type(out, e), tb = type(rhs, e);
      Arg b{e, rhs, op == "div" ? Gen::nonZero : Gen::integer,
            op == "pow" ? 0 : -1000000, op == "pow" ? 5 : 1000000};
      if (op == "div")
        b.lo = -7, b.hi = 7;
      add(op.str() + "_" + e, {{e, out, Gen::integer, -3000000, 3000000}, b},
          {to},
          "%r = sharc." + op.str() + " %a0, %a1 : (" + to + ", " + tb +
              ") -> " + to + "\n return %r : " + to);
    }
    for (StringRef op : {"and", "or"}) {
      auto s = shape(2);
      std::string t = type(s, "i1");
      add(op.str(), {{"i1", s, Gen::boolean}, {"i1", s, Gen::boolean}}, {t},
          "%r = sharc." + op.str() + " %a0, %a1 : (" + t + ", " + t + ") -> " +
              t + "\n return %r : " + t);
    }
    {
      auto s = shape(2);
      std::string t = type(s, "i1");
      add("not", {{"i1", s, Gen::boolean}}, {t},
          "%r = sharc.not %a0 : " + t + "\n return %r : " + t);
    }
    for (StringRef pred : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      std::string e = coin() ? floatType() : "i64";
      auto s = shape(uniform(1, 3));
      auto rhs = broadcastFrom(s);
      std::string ta = type(s, e), tb = type(rhs, e), tr = type(s, "i1");
      Gen gen = e == "i64" ? Gen::integer : Gen::ties;
      add("compare_" + pred.str(), {{e, s, gen, -2, 3}, {e, rhs, gen, -2, 3}},
          {tr},
          "%r = sharc.compare %a0, %a1 {predicate = #sharc.predicate<" +
              pred.str() + ">} : (" + ta + ", " + tb + ") -> " + tr +
              "\n return %r : " + tr);
    }
    for (int k = 0; k < 2; ++k) {
      std::string e = k ? "i64" : floatType();
      auto s = shape(uniform(1, 3));
      auto a = broadcastFrom(s), b = broadcastFrom(s);
      std::string tc = type(s, "i1"), ta = type(a, e), tb = type(b, e),
                  tr = type(s, e);
      add("select", {{"i1", s, Gen::boolean}, {e, a}, {e, b}}, {tr},
          "%r = sharc.select %a0, %a1, %a2 : (" + tc + ", " + ta + ", " + tb +
              ") -> " + tr + "\n return %r : " + tr);
    }
    std::pair<StringRef, StringRef> casts[] = {
        {"f32", "i64"}, {"i64", "f32"}, {"f32", "f64"}, {"f64", "f32"},
        {"i1", "f32"},  {"f32", "i1"},  {"i32", "i64"}, {"i64", "i32"},
        {"f64", "i32"}, {"i32", "f64"}};
    for (auto [from, to] : casts) {
      auto s = shape(uniform(1, 3));
      std::string ta = type(s, from), tr = type(s, to);
      Arg a{from.str(), s,
            from == "i1"                     ? Gen::boolean
            : from == "i64" || from == "i32" ? Gen::integer
                                             : Gen::ties};
      a.lo = -5000000000LL, a.hi = 5000000000LL;
      if (from == "i32")
        a.lo = -2000000000, a.hi = 2000000000;
      if (from == "f32" || from == "f64")
        a.gen = Gen::uniform;
      add(("cast_" + from + "_" + to).str(), {a}, {tr},
          "%r = sharc.cast %a0 : " + ta + " to " + tr + "\n return %r : " + tr);
    }
  }

  void chains() {
    for (int k = 0; k < 4; ++k) {
      std::string e = floatType();
      auto s = shape(uniform(1, 3));
      auto b = broadcastFrom(s);
      std::string t = type(s, e), tb = type(b, e), tc = type(s, "i1");
      std::string bin = "(" + t + ", " + tb + ") -> " + t;
      add("chain", {{e, s}, {e, b}}, {t, tc},
          "%c = sharc.constant dense<0.5> : tensor<" + e + ">\n" +
              "%0 = sharc.exp %a0 : " + t + "\n" + "%1 = sharc.mul %0, %a1 : " +
              bin + "\n" + "%2 = sharc.add %1, %c : (" + t + ", tensor<" + e +
              ">) -> " + t + "\n" + "%3 = sharc.tanh %2 : " + t + "\n" +
              "%4 = sharc.compare %3, %a1 {predicate = "
              "#sharc.predicate<gt>} : " +
              "(" + t + ", " + tb + ") -> " + tc + "\n" +
              "%5 = sharc.select %4, %3, %a0 : (" + tc + ", " + t + ", " + t +
              ") -> " + t + "\n return %5, %4 : " + t + ", " + tc,
          kBitwise);
    }
    // A chain feeding a reduction and a softmax (two fusions around them).
    std::string e = "f32";
    auto s = shape(2);
    std::string t = type(s, e), tr = type({s[0], 1}, e);
    add("chain_reduce", {{e, s}, {e, s}}, {t},
        "%0 = sharc.mul %a0, %a1 : (" + t + ", " + t + ") -> " + t + "\n" +
            "%1 = sharc.reduce %0 {kind = #sharc.reduce_kind<max>, axes = "
            "array<i64: 1>, keep_dims = true} : (" +
            t + ") -> " + tr + "\n" + "%2 = sharc.sub %0, %1 : (" + t + ", " +
            tr + ") -> " + t + "\n" + "%3 = sharc.softmax %2 {axis = 1} : " +
            t + "\n" + "%4 = sharc.relu %3 : " + t + "\n return %4 : " + t,
        1e-6);
  }

  void reductions() {
    for (int k = 0; k < 12; ++k) {
      std::string e = k % 4 == 3 ? "i64" : floatType();
      StringRef kind = k % 3 == 0 ? "sum" : k % 3 == 1 ? "mean" : "max";
      if (e == "i64" && kind == "mean")
        kind = "sum";
      int64_t rank = uniform(1, 4);
      auto s = shape(rank);
      SmallVector<int64_t> axes, out;
      bool keep = coin();
      for (int64_t d = 0; d < rank; ++d) {
        if (coin() || (d == rank - 1 && axes.empty())) {
          axes.push_back(d);
          if (keep)
            out.push_back(1);
        } else {
          out.push_back(s[d]);
        }
      }
      std::string t = type(s, e), tr = type(out, e);
      add(("reduce_" + kind).str(), {{e, s, Gen::integer, -1000, 1000}}, {tr},
          ("%r = sharc.reduce %a0 {kind = #sharc.reduce_kind<" + kind +
           ">, axes = " + ints(axes) +
           ", keep_dims = " + (keep ? "true" : "false") + "} : (" + t +
           ") -> " + tr + "\n return %r : " + tr)
              .str(),
          kBitwise);
      if (e != "i64")
        cases.back().args[0].gen = Gen::uniform;
    }
    // Float sums with many reduced elements (16-lane order): over leading
    // axes (the column-sum kernel), and over non-adjacent axes.
    for (int k = 0; k < 6; ++k) {
      std::string e = floatType();
      StringRef kind = k % 2 ? "mean" : "sum";
      SmallVector<int64_t> s = {uniform(1, 4), uniform(5, 40), uniform(1, 40)};
      SmallVector<int64_t> axes = {0, 1}, out = {s[2]};
      if (k >= 4) {
        axes = {0, 2};
        out = {s[1]};
      }
      std::string t = type(s, e), tr = type(out, e);
      add(("reduce_" + kind).str(), {{e, s}}, {tr},
          ("%r = sharc.reduce %a0 {kind = #sharc.reduce_kind<" + kind +
           ">, axes = " + ints(axes) + "} : (" + t + ") -> " + tr +
           "\n return %r : " + tr)
              .str(),
          kBitwise);
    }
    for (int k = 0; k < 6; ++k) {
      std::string e = floatType();
      int64_t rank = uniform(1, 3);
      auto s = shape(rank);
      int64_t axis = uniform(0, rank - 1);
      std::string t = type(s, e);
      std::string op = k % 2 ? "softmax" : "log_softmax";
      add(op, {{e, s}}, {t},
          "%r = sharc." + op + " %a0 {axis = " + std::to_string(axis) +
              "} : " + t + "\n return %r : " + t,
          kBitwise);
    }
    for (int k = 0; k < 6; ++k) {
      std::string e = floatType();
      int64_t rank = uniform(1, 3);
      auto s = shape(rank);
      int64_t axis = uniform(0, rank - 1);
      SmallVector<int64_t> normalized(ArrayRef<int64_t>(s).drop_front(axis));
      SmallVector<int64_t> stats(ArrayRef<int64_t>(s).take_front(axis));
      stats.append(rank - axis, 1);
      std::string t = type(s, e), ts = type(normalized, e), tm = type(stats, e);
      bool bias = k % 2;
      std::vector<Arg> args = {{e, s}, {e, normalized}};
      if (bias)
        args.push_back({e, normalized});
      add("layer_norm", args, {t, tm, tm},
          "%r:3 = sharc.layer_norm %a0, %a1" +
              std::string(bias ? ", %a2" : "") + " {axis = " +
              std::to_string(axis) + ", epsilon = 1.0e-5} : (" + t + ", " + ts +
              (bias ? ", " + ts : "") + ") -> (" + t + ", " + tm + ", " + tm +
              ")\n return %r#0, %r#1, %r#2 : " + t + ", " + tm + ", " + tm,
          kBitwise);
    }
  }

  void losses() {
    for (int k = 0; k < 12; ++k) {
      std::string e = floatType();
      std::string ti = coin() ? "i32" : "i64";
      StringRef reduction = k % 3 == 0 ? "none" : k % 3 == 1 ? "sum" : "mean";
      bool logits = k % 2;
      int64_t n = size(), c = pick({1, 3, 5, 17});
      SmallVector<int64_t> in = {n, c}, target = {n};
      if (coin()) {
        int64_t d = pick({1, 3, 5});
        in.push_back(d);
        target.push_back(d);
      }
      bool weight = coin();
      bool ignore = coin();
      int64_t ignoreIndex = coin() ? -1 : uniform(0, c - 1);
      std::string tin = type(in, e), tt = type(target, ti), tw = type({c}, e),
                  tr = reduction == "none" ? type(target, e) : type({}, e);
      std::vector<Arg> args = {{e, in, logits ? Gen::uniform : Gen::uniform},
                               {ti, target, Gen::integer,
                                ignore ? std::min<int64_t>(ignoreIndex, 0) : 0,
                                c}};
      if (weight)
        args.push_back({e, {c}, Gen::positive});
      std::string attrs =
          "reduction = #sharc.loss_reduction<" + reduction.str() + ">";
      if (ignore)
        attrs += ", ignore_index = " + std::to_string(ignoreIndex);
      std::string op = logits ? "cross_entropy" : "nll_loss";
      add(op, args, {tr},
          "%r = sharc." + op + " %a0, %a1" + (weight ? ", %a2" : "") + " {" +
              attrs + "} : (" + tin + ", " + tt + (weight ? ", " + tw : "") +
              ") -> " + tr + "\n return %r : " + tr,
          floatTolerance(e));
    }
  }

  void dataMovement() {
    for (int k = 0; k < 8; ++k) {
      // Embedding tables and their gradients in 16 bits too.
      std::string e = k % 3 == 0 ? "i64"
                      : k == 4   ? "bf16"
                      : k == 7   ? "f16"
                                 : floatType();
      std::string ti = coin() ? "i32" : "i64";
      int64_t rank = uniform(1, 3);
      auto s = shape(rank, 2048);
      int64_t axis = uniform(0, rank - 1);
      auto idx = shape(uniform(1, 2), 64);
      SmallVector<int64_t> out(ArrayRef<int64_t>(s).take_front(axis));
      out.append(idx.begin(), idx.end());
      out.append(s.begin() + axis + 1, s.end());
      std::string td = type(s, e), tidx = type(idx, ti), tr = type(out, e);
      add("gather",
          {{e, s, Gen::integer, -1000, 1000},
           {ti, idx, Gen::integer, -s[axis], s[axis]}},
          {tr},
          "%r = sharc.gather %a0, %a1 {axis = " + std::to_string(axis) +
              "} : (" + td + ", " + tidx + ") -> " + tr +
              "\n return %r : " + tr);
      if (e != "i64")
        cases.back().args[0].gen = Gen::uniform;
      // scatter_add is float only.
      std::string f = e == "i64" ? "f64" : e;
      std::string tf = type(s, f), tu = type(out, f);
      add("scatter_add",
          {{f, s}, {ti, idx, Gen::integer, -s[axis], s[axis]}, {f, out}}, {tf},
          "%r = sharc.scatter_add %a0, %a1, %a2 {axis = " +
              std::to_string(axis) + "} : (" + tf + ", " + tidx + ", " + tu +
              ") -> " + tf + "\n return %r : " + tf,
          floatTolerance(f));
    }
    // An embedding gradient whose rows span two of the kernel's 256-wide
    // blocks.
    add("scatter_add",
        {{"f32", {5, 300}},
         {"i64", {7}, Gen::integer, -5, 5},
         {"f32", {7, 300}}},
        {"tensor<5x300xf32>"},
        "%r = sharc.scatter_add %a0, %a1, %a2 {axis = 0} : "
        "(tensor<5x300xf32>, tensor<7xi64>, tensor<7x300xf32>) -> "
        "tensor<5x300xf32>\n return %r : tensor<5x300xf32>",
        floatTolerance("f32"));
    for (int k = 0; k < 6; ++k) {
      std::string e = k % 2 ? "i32" : "f32";
      int64_t rank = uniform(1, 4);
      auto s = shape(rank);
      SmallVector<int64_t> perm;
      for (int64_t d = 0; d < rank; ++d)
        perm.push_back(d);
      std::shuffle(perm.begin(), perm.end(), rng);
      SmallVector<int64_t> out;
      for (int64_t p : perm)
        out.push_back(s[p]);
      std::string t = type(s, e), tr = type(out, e);
      add("transpose", {{e, s, Gen::integer}}, {tr},
          "%r = sharc.transpose %a0 {permutation = " + ints(perm) + "} : (" +
              t + ") -> " + tr + "\n return %r : " + tr);
    }
    for (int k = 0; k < 8; ++k) {
      std::string e = k % 2 ? "i64" : k == 2 ? "bf16" : k == 4 ? "f16" : "f64";
      int64_t rank = uniform(1, 3);
      auto s = shape(rank);
      SmallVector<int64_t> start, stride, out;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t st = pick({1, 1, 2, 3, -1, -2});
        int64_t begin = uniform(0, s[d] - 1);
        int64_t room = st > 0 ? (s[d] - 1 - begin) / st + 1 : begin / -st + 1;
        start.push_back(begin);
        stride.push_back(st);
        out.push_back(uniform(1, room));
      }
      std::string t = type(s, e), tr = type(out, e);
      std::string attrs =
          "{start = " + ints(start) + ", stride = " + ints(stride) + "}";
      add("slice", {{e, s, Gen::integer}}, {tr},
          "%r = sharc.slice %a0 " + attrs + " : " + t + " to " + tr +
              "\n return %r : " + tr);
      add("insert_slice", {{e, out, Gen::integer}, {e, s, Gen::integer}}, {t},
          "%r = sharc.insert_slice %a0 into %a1 " + attrs + " : " + tr +
              " into " + t + "\n return %r : " + t);
    }
    for (int k = 0; k < 4; ++k) {
      std::string e = floatType();
      int64_t rank = uniform(1, 3);
      auto s = shape(rank);
      int64_t axis = uniform(0, rank - 1);
      int64_t count = uniform(1, 3);
      std::vector<Arg> args;
      std::vector<std::string> types, names;
      SmallVector<int64_t> out = s;
      out[axis] = 0;
      for (int64_t j = 0; j < count; ++j) {
        SmallVector<int64_t> part = s;
        part[axis] = size();
        out[axis] += part[axis];
        args.push_back({e, part});
        types.push_back(type(part, e));
        names.push_back("%a" + std::to_string(j));
      }
      std::string tr = type(out, e);
      add("concat", args, {tr},
          "%r = sharc.concat " + llvm::join(names, ", ") +
              " {axis = " + std::to_string(axis) + "} : (" +
              llvm::join(types, ", ") + ") -> " + tr + "\n return %r : " + tr);
    }
    for (int k = 0; k < 4; ++k) {
      std::string e = k % 2 ? "i1" : "f32";
      auto out = shape(uniform(1, 3));
      auto in = broadcastFrom(out);
      std::string t = type(in, e), tr = type(out, e);
      add("broadcast", {{e, in, e == "i1" ? Gen::boolean : Gen::uniform}}, {tr},
          "%r = sharc.broadcast %a0 : " + t + " to " + tr +
              "\n return %r : " + tr);
      SmallVector<int64_t> flat = {1};
      for (int64_t d : out)
        flat[0] *= d;
      std::string tf = type(flat, e);
      add("reshape", {{e, out, e == "i1" ? Gen::boolean : Gen::uniform}}, {tf},
          "%r = sharc.reshape %a0 : " + tr + " to " + tf +
              "\n return %r : " + tf);
    }
    for (StringRef e : {"i32", "i64", "f32"}) {
      int64_t rank = uniform(1, 3);
      auto s = shape(rank);
      std::string t = type(s, e);
      add("iota", {}, {t},
          "%r = sharc.iota {dimension = " +
              std::to_string(uniform(0, rank - 1)) + "} : " + t +
              "\n return %r : " + t);
    }
    // An iota read by an elementwise op: sharc-fuse clones it into the op's
    // fusion, whose kernel computes each index from the element's position
    // (a dimension of size 1 gives 0; strides that are not powers of two
    // divide in 32 bits).
    for (int k = 0; k < 8; ++k) {
      // Two fixed cases first: along a dimension of size 1 after others,
      // and along a middle dimension of size 3.
      int64_t rank = k < 2 ? 3 : uniform(1, 3);
      SmallVector<int64_t> s =
          k == 0 ? SmallVector<int64_t>{3, 1, 5}
                 : (k == 1 ? SmallVector<int64_t>{2, 3, 5} : shape(rank));
      int64_t dim = k < 2 ? 1 : uniform(0, rank - 1);
      std::string ti = type(s, "i64"), tf = type(s, "f32");
      add("fused_iota", {{"f32", s, Gen::uniform}}, {tf},
          "%i = sharc.iota {dimension = " + std::to_string(dim) + "} : " + ti +
              "\n %c = sharc.cast %i : " + ti + " to " + tf +
              "\n %r = sharc.mul %a0, %c : (" + tf + ", " + tf + ") -> " + tf +
              "\n return %r : " + tf);
    }
    // Dropout masks: rows that divide the element count (one block per row,
    // an odd row length among them) and rows that do not (one block).
    for (int k = 0; k < 6; ++k) {
      int64_t rows = pick({1, 3, 4, 5});
      SmallVector<int64_t> s = {k % 3 == 2 ? rows + 1 : rows, size(), size()};
      std::string t = type(s, "i1"), tr = type({rows}, "i64");
      add("dropout_mask",
          {{"i64", {}, Gen::integer, 0, 1000},
           {"i64", {rows}, Gen::integer, 0, 1 << 20}},
          {t},
          "%r = sharc.dropout_mask %a0, %a1 {ratio = " +
              std::string(k % 2 ? "0.1" : "0.5") +
              " : f64, seed = " + std::to_string(uniform(-1000, 1000)) +
              " : i64, stream = " + std::to_string(k) +
              " : i64} : (tensor<i64>, " + tr + ") -> " + t +
              "\n return %r : " + t);
    }
    {
      std::string t = type({size()}, "i64");
      add("sample_rows", {}, {t},
          "%r = sharc.sample_rows : " + t + "\n return %r : " + t);
    }
    for (int k = 0; k < 6; ++k) {
      std::string e = k % 2 ? "i64" : k == 2 ? "f32" : k == 4 ? "bf16" : "f16";
      auto s = shape(uniform(2, 3));
      std::string t = type(s, e);
      add("trilu", {{e, s, Gen::integer}}, {t},
          "%r = sharc.trilu %a0 {upper = " +
              std::string(coin() ? "true" : "false") +
              ", diagonal = " + std::to_string(uniform(-3, 3)) + "} : " + t +
              "\n return %r : " + t);
    }
  }

  void matmuls() {
    for (int k = 0; k < 10; ++k) {
      std::string e = floatType();
      int64_t m = size(), n = size(), kk = size();
      bool ta = coin(), tb = coin();
      SmallVector<int64_t> batchA, batchB, batch;
      int kind = k % 4; // 0: none, 1: same, 2: one side, 3: mixed
      if (kind == 1)
        batchA = batchB = batch = {pick({2, 3})};
      if (kind == 2) {
        batchA = batch = {2, 3};
      }
      if (kind == 3) {
        batchA = {2, 1};
        batchB = {3};
        batch = {2, 3};
      }
      if (coin())
        std::swap(batchA, batchB);
      SmallVector<int64_t> a = batchA, b = batchB, c = batch;
      a.append(ta ? SmallVector<int64_t>{kk, m} : SmallVector<int64_t>{m, kk});
      b.append(tb ? SmallVector<int64_t>{n, kk} : SmallVector<int64_t>{kk, n});
      c.append({m, n});
      std::string tA = type(a, e), tB = type(b, e), tC = type(c, e);
      std::string attrs;
      if (ta || tb)
        attrs = std::string(" {") + (ta ? "transpose_lhs = true" : "") +
                (ta && tb ? ", " : "") + (tb ? "transpose_rhs = true" : "") +
                "}";
      std::string product = "sharc.matmul %a0, %a1" + attrs + " : (" + tA +
                            ", " + tB + ") -> " + tC;
      // Every other product gets a bias: the GEMM's epilogue.
      bool bias = k % 2 == 1;
      std::string tBias = type({n}, e);
      Case &added =
          bias ? add("matmul_bias", {{e, a}, {e, b}, {e, {n}}}, {tC},
                     "%p = " + product + "\n %r = sharc.add %p, %a2 : (" + tC +
                         ", " + tBias + ") -> " + tC + "\n return %r : " + tC,
                     floatTolerance(e))
               : add("matmul", {{e, a}, {e, b}}, {tC},
                     "%r = " + product + "\n return %r : " + tC,
                     floatTolerance(e));
      // sgemm accumulates in f32.
      if (e == "f32")
        added.scaled = 1e-5;
    }
    // Attention heads: split [batch, tokens, heads x dim] into per-head
    // matrices read in place by the GEMMs (and K read transposed), and the
    // per-head products written back side by side (sharc-fuse gemm views).
    for (std::string e : {"f32", "f64"}) {
      int64_t b = size(), t = size(), h = pick({2, 3}), d = size();
      std::string flat = type({b, t, h * d}, e), split = type({b, t, h, d}, e),
                  heads = type({b, h, t, d}, e), keys = type({b, h, d, t}, e),
                  scores = type({b, h, t, t}, e),
                  merged = type({b, t, h, d}, e);
      Case &added = add(
          "attention", {{e, {b, t, h * d}}, {e, {b, t, h * d}}}, {flat},
          "%q4 = sharc.reshape %a0 : " + flat + " to " + split +
              "\n %k4 = sharc.reshape %a1 : " + flat + " to " + split +
              "\n %q = sharc.transpose %q4 {permutation = array<i64: 0, 2, 1, "
              "3>} : (" +
              split + ") -> " + heads +
              "\n %k = sharc.transpose %k4 {permutation = array<i64: 0, 2, 3, "
              "1>} : (" +
              split + ") -> " + keys + "\n %s = sharc.matmul %q, %k : (" +
              heads + ", " + keys + ") -> " + scores +
              "\n %o = sharc.matmul %s, %q : (" + scores + ", " + heads +
              ") -> " + heads +
              "\n %m = sharc.transpose %o {permutation = array<i64: 0, 2, 1, "
              "3>} : (" +
              heads + ") -> " + merged + "\n %r = sharc.reshape %m : " +
              merged + " to " + flat + "\n return %r : " + flat,
          floatTolerance(e));
      if (e == "f32")
        added.scaled = 1e-5;
    }
    // Activation epilogues: act(matmul [+ bias]), ReLU or tanh-GELU, some
    // also returning the pre-activation (the GEMM's aux output).
    for (int k = 0; k < 8; ++k) {
      std::string e = k % 4 == 3 ? "f64" : "f32";
      int64_t m = size(), n = size(), kk = size();
      SmallVector<int64_t> a = {m, kk}, b = {kk, n}, c = {m, n};
      if (coin()) {
        a.insert(a.begin(), 2);
        c.insert(c.begin(), 2);
      }
      std::string tA = type(a, e), tB = type(b, e), tC = type(c, e);
      bool bias = k % 3 != 0, aux = bias && k >= 4;
      std::string act = k % 2 ? "sharc.relu %z"
                              : "sharc.gelu %z {approximation = "
                                "#sharc.gelu_approximation<tanh>}";
      std::string body = "%p = sharc.matmul %a0, %a1 : (" + tA + ", " + tB +
                         ") -> " + tC + "\n";
      std::vector<Arg> args = {{e, a}, {e, b}};
      if (bias) {
        body += " %z = sharc.add %p, %a2 : (" + tC + ", " + type({n}, e) +
                ") -> " + tC + "\n";
        args.push_back({e, {n}});
      } else {
        act.replace(act.find("%z"), 2, "%p");
      }
      body += " %r = " + act + " : " + tC + "\n return %r" +
              (aux ? ", %z : " + tC + ", " : " : ") + tC;
      std::vector<std::string> results = {tC};
      if (aux)
        results.push_back(tC);
      Case &added =
          add("matmul_epilogue", args, results, body, floatTolerance(e));
      if (e == "f32")
        added.scaled = 1e-5;
    }
  }

  void windows() {
    for (int k = 0; k < 18; ++k) {
      // Convolutions and pooling in 16 bits too (k >= 14).
      std::string e = k >= 16      ? "bf16"
                      : k >= 14    ? "f16"
                      : k % 4 == 3 ? "f64"
                                   : "f32";
      int64_t groups = pick({1, 1, 2, 3});
      int64_t n = pick({1, 2, 3}), c = groups * pick({1, 2, 3}),
              o = groups * pick({1, 2, 3});
      int64_t kh = pick({1, 2, 3, 5}), kw = pick({1, 2, 3});
      SmallVector<int64_t> strides = {pick({1, 2, 3}), pick({1, 2})};
      SmallVector<int64_t> dil = {pick({1, 1, 2}), pick({1, 2})};
      SmallVector<int64_t> pad = {uniform(0, 2), uniform(0, 2), uniform(0, 2),
                                  uniform(0, 2)};
      int64_t h = pick({5, 7, 17}), w = pick({1, 3, 5, 17});
      int64_t oh =
          windowOutputSize(h, kh, strides[0], pad[0], pad[2], dil[0], false);
      int64_t ow =
          windowOutputSize(w, kw, strides[1], pad[1], pad[3], dil[1], false);
      if (oh <= 0 || ow <= 0)
        continue;
      SmallVector<int64_t> x = {n, c, h, w}, wt = {o, c / groups, kh, kw},
                           y = {n, o, oh, ow};
      std::string tx = type(x, e), tw = type(wt, e), ty = type(y, e),
                  tb = type({o}, e);
      std::string attrs = "{strides = " + ints(strides) +
                          ", padding = " + ints(pad) +
                          ", dilations = " + ints(dil) +
                          ", groups = " + std::to_string(groups) + "}";
      bool bias = coin();
      std::vector<Arg> args = {{e, x}, {e, wt}};
      if (bias)
        args.push_back({e, {o}});
      double tol = floatTolerance(e);
      add("conv2d", args, {ty},
          "%r = sharc.conv2d %a0, %a1" + std::string(bias ? ", %a2" : "") +
              " " + attrs + " : (" + tx + ", " + tw + (bias ? ", " + tb : "") +
              ") -> " + ty + "\n return %r : " + ty,
          tol);
      add("conv2d_input_grad", {{e, y}, {e, wt}}, {tx},
          "%r = sharc.conv2d_input_grad %a0, %a1 " + attrs + " : (" + ty +
              ", " + tw + ") -> " + tx + "\n return %r : " + tx,
          tol);
      add("conv2d_weight_grad", {{e, x}, {e, y}}, {tw},
          "%r = sharc.conv2d_weight_grad %a0, %a1 " + attrs + " : (" + tx +
              ", " + ty + ") -> " + tw + "\n return %r : " + tw,
          tol);
    }
    for (int k = 0; k < 20; ++k) {
      std::string e = k >= 18      ? "bf16"
                      : k >= 16    ? "f16"
                      : k % 4 == 3 ? "f64"
                                   : "f32";
      int64_t n = pick({1, 2}), c = pick({1, 3});
      int64_t kh = pick({1, 2, 3}), kw = pick({2, 3});
      SmallVector<int64_t> strides = {pick({1, 2, 3}), pick({1, 2})};
      SmallVector<int64_t> pad = {uniform(0, kh / 2), uniform(0, kw / 2),
                                  uniform(0, kh / 2), uniform(0, kw / 2)};
      bool ceil = coin();
      bool maxPool = k % 2 == 0;
      SmallVector<int64_t> dil = {1, 1};
      if (maxPool)
        dil = {pick({1, 2}), pick({1, 2})};
      int64_t h = pick({3, 5, 7, 17}), w = pick({1, 3, 5, 17});
      int64_t oh =
          windowOutputSize(h, kh, strides[0], pad[0], pad[2], dil[0], ceil);
      int64_t ow =
          windowOutputSize(w, kw, strides[1], pad[1], pad[3], dil[1], ceil);
      if (oh <= 0 || ow <= 0)
        continue;
      SmallVector<int64_t> x = {n, c, h, w}, y = {n, c, oh, ow};
      std::string tx = type(x, e), ty = type(y, e);
      std::string attrs = "kernel = " + ints({kh, kw}) +
                          ", strides = " + ints(strides) +
                          ", padding = " + ints(pad) +
                          ", ceil_mode = " + (ceil ? "true" : "false");
      double tol = floatTolerance(e);
      if (maxPool) {
        attrs += ", dilations = " + ints(dil);
        add("max_pool2d", {{e, x, Gen::ties}}, {ty},
            "%r = sharc.max_pool2d %a0 {" + attrs + "} : (" + tx + ") -> " +
                ty + "\n return %r : " + ty);
        add("max_pool2d_grad", {{e, x, Gen::ties}, {e, y}}, {tx},
            "%r = sharc.max_pool2d_grad %a0, %a1 {" + attrs + "} : (" + tx +
                ", " + ty + ") -> " + tx + "\n return %r : " + tx,
            tol);
      } else {
        attrs +=
            std::string(", count_include_pad = ") + (coin() ? "true" : "false");
        add("avg_pool2d", {{e, x}}, {ty},
            "%r = sharc.avg_pool2d %a0 {" + attrs + "} : (" + tx + ") -> " +
                ty + "\n return %r : " + ty,
            tol);
        add("avg_pool2d_grad", {{e, y}}, {tx},
            "%r = sharc.avg_pool2d_grad %a0 {" + attrs + "} : (" + ty +
                ") -> " + tx + "\n return %r : " + tx,
            tol);
      }
    }
  }

  /// Random values for `arg`.
  Tensor values(const Arg &arg) {
    DType dtype = dtypeFor(arg.element);
    Tensor t(dtype, arg.shape);
    int64_t count = 1;
    for (int64_t d : arg.shape)
      count *= d;
    for (int64_t i = 0; i < count; ++i) {
      double v = 0;
      switch (arg.gen) {
      case Gen::uniform:
        v = std::uniform_real_distribution<double>(-2, 2)(rng);
        break;
      case Gen::positive:
        v = std::uniform_real_distribution<double>(0.1, 3)(rng);
        break;
      case Gen::ties:
        v = uniform(0, 40) == 0 ? NAN : static_cast<double>(uniform(-2, 2));
        break;
      case Gen::integer:
        v = static_cast<double>(uniform(arg.lo, arg.hi - 1));
        break;
      case Gen::nonZero:
        do
          v = static_cast<double>(uniform(arg.lo, arg.hi - 1));
        while (v == 0);
        break;
      case Gen::boolean:
        v = coin();
        break;
      }
      if (isFloat(dtype))
        t.setDouble(i, roundTo(dtype, v));
      else
        t.setDouble(i, v);
    }
    return t;
  }

  std::mt19937_64 rng;
};

/// Raw bytes of `t` in the runtime's layout.
std::vector<char> toBytes(const Tensor &t) {
  size_t n = t.numElements();
  std::vector<char> bytes(std::max<size_t>(1, n * bytesOf(t.dtype())));
  for (size_t i = 0; i < n; ++i) {
    char *at = bytes.data() + i * bytesOf(t.dtype());
    switch (t.dtype()) {
    case DType::f32: {
      float v = static_cast<float>(t.getDouble(i));
      std::memcpy(at, &v, 4);
      break;
    }
    case DType::f64: {
      double v = t.getDouble(i);
      std::memcpy(at, &v, 8);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      // The tensor holds 16-bit values exactly, so the f32 conversion is
      // exact too.
      float v = static_cast<float>(t.getDouble(i));
      uint16_t bits =
          t.dtype() == DType::f16 ? rt::floatToHalf(v) : rt::floatToBFloat16(v);
      std::memcpy(at, &bits, 2);
      break;
    }
    case DType::i32: {
      int32_t v = static_cast<int32_t>(t.getInt(i));
      std::memcpy(at, &v, 4);
      break;
    }
    case DType::i1:
      *at = t.getInt(i) != 0;
      break;
    default: {
      int64_t v = t.getInt(i);
      std::memcpy(at, &v, 8);
      break;
    }
    }
  }
  return bytes;
}

/// Element `i` of raw bytes of type `t` as a double (floats) or integer.
double loadFloat(const char *bytes, DType t, size_t i) {
  if (t == DType::f16 || t == DType::bf16) {
    uint16_t bits;
    std::memcpy(&bits, bytes + 2 * i, 2);
    return t == DType::f16 ? rt::halfToFloat(bits) : rt::bfloat16ToFloat(bits);
  }
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  double v;
  std::memcpy(&v, bytes + 8 * i, 8);
  return v;
}
int64_t loadInt(const char *bytes, DType t, size_t i) {
  if (t == DType::i1)
    return bytes[i] != 0;
  if (t == DType::i32) {
    int32_t v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, bytes + 8 * i, 8);
  return v;
}

class KernelTest : public IRTest {};

TEST_F(KernelTest, GeneratedKernelsMatchTheEvaluator) {
  auto start = std::chrono::steady_clock::now();
  CaseBuilder builder(20261130);
  // Two rounds of every family, each with its own random shapes.
  for (int round = 0; round < 2; ++round) {
    builder.elementwise();
    builder.halfPrecision();
    builder.chains();
    builder.reductions();
    builder.losses();
    builder.dataMovement();
    builder.matmuls();
    builder.windows();
  }
  std::vector<Case> &cases = builder.cases;

  std::string text;
  for (const Case &c : cases) {
    std::vector<std::string> params;
    for (auto [i, arg] : llvm::enumerate(c.args))
      params.push_back("%a" + std::to_string(i) + ": " +
                       type(arg.shape, arg.element));
    text += "func.func @" + c.name + "(" + llvm::join(params, ", ") + ") -> (" +
            llvm::join(c.results, ", ") + ") {\n" + c.body + "\n}\n";
  }
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics << "\n" << text;

  // Reference results, before any pass.
  std::vector<std::vector<Tensor>> inputs, expected;
  for (const Case &c : cases) {
    auto func = module->lookupSymbol<func::FuncOp>(c.name);
    std::vector<Tensor> args;
    for (const Arg &arg : c.args)
      args.push_back(builder.values(arg));
    FailureOr<std::vector<Tensor>> results = evaluate(func, args);
    ASSERT_TRUE(succeeded(results)) << c.name << ": " << diagnostics;
    inputs.push_back(std::move(args));
    expected.push_back(std::move(*results));
  }

  PassManager pm(&context);
  pm.addPass(createFusePass(/*singletons=*/false));
  pm.addPass(createPlanMemory());
  ASSERT_TRUE(succeeded(pm.run(*module))) << diagnostics;
  std::string source;
  llvm::raw_string_ostream os(source);
  ASSERT_TRUE(succeeded(emitFunctionLibrary(*module, os))) << diagnostics;

  // Compile the library once.
  SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("sharc-kernels", dir));
  std::string cpp = (dir + "/kernels.cpp").str();
  std::string stub = (dir + "/fatal.cpp").str();
  std::string lib = (dir + "/kernels.so").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(cpp, ec);
    ASSERT_FALSE(ec);
    out << source;
    llvm::raw_fd_ostream fatal(stub, ec);
    ASSERT_FALSE(ec);
    fatal << "#include \"runtime/Errors.h\"\n#include <cstdio>\n"
             "#include <cstdlib>\n"
             "void sharc::rt::fatal(const std::string &m) {\n"
             "  std::fprintf(stderr, \"sharc: error: %s\\n\", m.c_str());\n"
             "  std::abort();\n}\n";
  }
  // The kernels as programs are compiled (C++17, no FMA contraction, as
  // sharc compile does); the runtime's GEMM, thread pool and 16-bit
  // conversions and a fatal() that aborts, in C++20 as the runtime.
  std::string cxx =
      std::string(SHARC_TEST_CXX) +
      " -O1 -fPIC -ffp-contract=off -fno-trapping-math -fno-math-errno -I" +
      SHARC_SOURCE_DIR + " ";
  std::string folder = dir.str().str();
  std::string command =
      cxx + "-std=c++17 -c " + cpp + " -o " + cpp + ".o && " + cxx +
      "-std=c++20 -c " + SHARC_SOURCE_DIR + "/runtime/Gemm.cpp -o " + folder +
      "/gemm.o && " + cxx + "-std=c++20 -c " + SHARC_SOURCE_DIR +
      "/runtime/ThreadPool.cpp -o " + folder + "/pool.o && " + cxx +
      "-std=c++20 -c " + SHARC_SOURCE_DIR + "/runtime/GemmBf16.cpp -o " +
      folder + "/gemmbf16.o && " + cxx + "-std=c++20 -c " + SHARC_SOURCE_DIR +
      "/runtime/Float16.cpp -o " + folder + "/float16.o && " + cxx +
      "-std=c++20 -c " + stub + " -o " + stub + ".o && " + cxx + "-shared " +
      cpp + ".o " + folder + "/gemm.o " + folder + "/pool.o " + folder +
      "/float16.o " + folder + "/gemmbf16.o " + stub + ".o -o " + lib + " " +
      SHARC_TEST_BLAS + " " + SHARC_TEST_DNNL + " -lpthread 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  void *handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();

  int compared = 0, bitwise = 0, floatOutputs = 0;
  std::vector<std::string> inexact;
  for (auto [k, c] : llvm::enumerate(cases)) {
    std::string symbol = "sharc_fn_" + c.name;
    auto fn = reinterpret_cast<void (*)(const rt::StepContext *)>(
        dlsym(handle, symbol.c_str()));
    auto arenaBytes = reinterpret_cast<int64_t (*)()>(
        dlsym(handle, (symbol + "_arena_bytes").c_str()));
    ASSERT_TRUE(fn && arenaBytes) << symbol;
    std::vector<std::vector<char>> storage;
    for (const Tensor &t : inputs[k])
      storage.push_back(toBytes(t));
    for (const Tensor &t : expected[k])
      storage.push_back(std::vector<char>(
          std::max<size_t>(1, t.numElements() * bytesOf(t.dtype())),
          static_cast<char>(0x7f)));
    std::vector<void *> pointers;
    for (std::vector<char> &bytes : storage)
      pointers.push_back(bytes.data());
    size_t arena = (std::max<int64_t>(arenaBytes(), 1) + 255) / 256 * 256;
    char *memory = static_cast<char *>(std::aligned_alloc(256, arena));
    rt::StepContext ctx{pointers.data(), memory, nullptr, nullptr};
    fn(&ctx);
    std::free(memory);

    for (auto [r, want] : llvm::enumerate(expected[k])) {
      const char *got = storage[inputs[k].size() + r].data();
      DType dtype = want.dtype();
      bool fp = isFloat(dtype);
      double largest = 0;
      if (fp)
        for (int64_t i = 0; i < want.numElements(); ++i)
          if (std::isfinite(want.getDouble(i)))
            largest = std::max(largest, std::fabs(want.getDouble(i)));
      bool same = true;
      int reported = 0;
      for (int64_t i = 0; i < want.numElements(); ++i) {
        if (!fp) {
          int64_t a = loadInt(got, dtype, i), b = want.getInt(i);
          if (a != b && reported++ < 3)
            ADD_FAILURE() << c.name << " result " << r << " element " << i
                          << ": " << a << " != " << b << "\n"
                          << c.body;
          same = same && a == b;
          continue;
        }
        double a = loadFloat(got, dtype, i), b = want.getDouble(i);
        bool equal = a == b || (std::isnan(a) && std::isnan(b));
        same = same && equal && std::signbit(a) == std::signbit(b);
        double allowed = c.relative * std::fabs(b) + c.scaled * largest;
        if (!equal && !(std::fabs(a - b) <= allowed) && reported++ < 3)
          ADD_FAILURE() << c.name << " result " << r << " element " << i << ": "
                        << llvm::formatv("{0:e17}", a).str() << " vs expected "
                        << llvm::formatv("{0:e17}", b).str() << "\n"
                        << c.body;
      }
      ++compared;
      if (fp) {
        ++floatOutputs;
        bitwise += same;
        if (!same)
          inexact.push_back(c.name);
      }
    }
  }
  dlclose(handle);
  llvm::sys::fs::remove_directories(dir);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("kernel test: %zu functions, %d outputs compared, %d of %d "
              "float outputs bitwise equal, %.1f s\n",
              cases.size(), compared, bitwise, floatOutputs, seconds);
  std::printf("kernel test: not bitwise equal (within tolerance): %s\n",
              llvm::join(inexact, " ").c_str());
  EXPECT_GT(cases.size(), 300u);
}

} // namespace
