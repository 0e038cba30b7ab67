//===- sharc-opt.cpp - sharc optimizer driver -------------------------------===//
//
// MlirOptMain with the sharc dialect, the sharc passes and MLIR's generic
// transformations registered; used by the lit tests and for experimenting
// with pass pipelines.
//
//===----------------------------------------------------------------------===//

#include "ir/SharcOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<sharc::SharcDialect, mlir::func::FuncDialect>();
  mlir::registerTransformsPasses();
  sharc::registerSharcPasses();
  sharc::registerSharcPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "sharc optimizer driver\n", registry));
}
