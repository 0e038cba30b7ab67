//===- EmitLibrary.cpp - Every function of a module as C functions --------===//
//
// Library mode of the program emitter, for testing kernels one by one: each
// memory-planned function of a module becomes its own namespace with its
// kernels and one `extern "C"` entry point whose buffers are the function's
// arguments followed by its results.  The ops are emitted exactly as in a
// training program; only the buffer table and the return differ.
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterInternal.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace sharc;
using namespace sharc::codegen;

namespace sharc::codegen {

LogicalResult ProgramEmitter::collectLibraryBuffers() {
  Block &entry = step.getBody().front();
  auto add = [&](Type type, std::string name, StringRef role) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !tensor.hasStaticShape() ||
        storageType(tensor.getElementType()).empty())
      return step.emitError() << "code generation: " << name << " of '@"
                              << step.getSymName() << "' has type " << type
                              << ", which library mode does not support";
    Buffer buffer;
    buffer.name = std::move(name);
    buffer.role = role.str();
    buffer.element = tensor.getElementType();
    buffer.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    buffers.push_back(std::move(buffer));
    return success();
  };
  for (BlockArgument arg : entry.getArguments()) {
    if (failed(
            add(arg.getType(), "argument " + str(arg.getArgNumber()), "input")))
      return failure();
    bufferOf[arg] = static_cast<int>(buffers.size()) - 1;
  }
  for (auto [r, type] : llvm::enumerate(step.getResultTypes()))
    if (failed(add(type, "result " + str(r), "output")))
      return failure();
  return success();
}

LogicalResult ProgramEmitter::emitLibraryReturn(func::ReturnOp ret) {
  unsigned numArguments = step.getNumArguments();
  for (auto [r, value] : llvm::enumerate(ret.getOperands())) {
    FailureOr<std::string> src = pointerTo(value);
    if (failed(src))
      return failure();
    const Buffer &buffer = buffers[numArguments + r];
    int64_t bytes = numElements(buffer.shape) * elementBytes(buffer.element);
    body() += "  sharc::kern::copy(ctx, ctx->buffers[" +
                str(numArguments + r) + "], " + *src + ", " + str(bytes) +
                ");\n";
  }
  return success();
}

LogicalResult ProgramEmitter::runLibrary(llvm::raw_ostream &os, StringRef space,
                                         StringRef symbol) {
  library = true;
  FailureOr<int64_t> arenaBytes = emitFunction();
  if (failed(arenaBytes))
    return failure();

  os << "namespace " << space << " {\nusing namespace sharc::kern;\n\n";
  writeKernelsAndTables(os);
  os << "extern \"C\" int64_t " << symbol << "_arena_bytes() {\n  return "
     << *arenaBytes << ";\n}\n\n";
  // Constants get buffer slots after the arguments and results, so the op
  // code (which reads ctx->buffers) is the same as in a program.
  os << "extern \"C\" void " << symbol
     << "(const sharc::rt::StepContext *outer) {\n"
     << "  void *const all[] = {";
  for (auto [i, buffer] : llvm::enumerate(buffers)) {
    if (buffer.role == "constant")
      os << "const_cast<void *>(static_cast<const void *>(constant" << i
         << ")), ";
    else
      os << "outer->buffers[" << i << "], ";
  }
  os << "nullptr};\n"
     << "  sharc::rt::StepContext inner = *outer;\n"
     << "  inner.buffers = all;\n"
     << "  const sharc::rt::StepContext *ctx = &inner;\n"
     << body() << "  if (int code = sharc::kern::takeError(ctx))\n"
     << "    sharc::rt::fatal(std::string(" << cppStringLiteral(symbol)
     << ") + \": \" + messages[code - 1]);\n"
     << "}\n} // namespace " << space << "\n\n";
  return success();
}

} // namespace sharc::codegen

LogicalResult sharc::emitFunctionLibrary(ModuleOp module,
                                         llvm::raw_ostream &os) {
  std::string text;
  llvm::raw_string_ostream body(text);
  llvm::StringSet<> symbols;
  EmitOptions options;
  ProgramReport report;
  for (auto [k, func] : llvm::enumerate(module.getOps<func::FuncOp>())) {
    if (func.isExternal())
      continue;
    std::string name = func.getSymName().str();
    for (char &c : name)
      if (!llvm::isAlnum(c) && c != '_')
        c = '_';
    std::string symbol = "sharc_fn_" + name;
    auto taken = [&](const std::string &s) {
      return symbols.contains(s) || symbols.contains(s + "_arena_bytes");
    };
    if (taken(symbol))
      symbol += llvm::formatv("_{0}", k).str();
    if (taken(symbol))
      return func.emitError() << "code generation: cannot name '@"
                              << func.getSymName() << "' uniquely";
    symbols.insert(symbol);
    symbols.insert(symbol + "_arena_bytes");
    if (failed(codegen::ProgramEmitter(func, options, report)
                   .runLibrary(body, llvm::formatv("sharc_lib_{0}", k).str(),
                               symbol)))
      return failure();
  }
  os << "// Generated by sharc (function library). Do not edit.\n"
     << "#include \"runtime/Errors.h\"\n"
     << "#include \"runtime/Kernels.h\"\n\n"
     << "#include <string>\n\n"
     << text;
  return success();
}
