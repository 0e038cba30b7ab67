//===- OpSchemas.h - ONNX's operator schemas, exceptions contained -*- C++ -*-//
//
// ONNX's schema registry (onnx/defs/schema.h) is compiled with exceptions.
// OpSchemas.cpp is built with -fexceptions and catches everything, so no
// exception crosses into the rest of the importer (built without
// exceptions).  This header therefore includes no MLIR, LLVM or ONNX
// headers.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_ONNX_OPSCHEMAS_H
#define SHARC_FRONTENDS_ONNX_OPSCHEMAS_H

#include <cstdint>
#include <string>

namespace sharc::onnx_import {

/// Looks up the definition of default-domain operator `opType` in force at
/// default-domain opset `opset` in ONNX's schema registry.  Sets
/// `sinceVersion` to the opset that introduced that definition (e.g. 11 for
/// Unsqueeze at opset 12), or to 0 when `opset` defines no such operator (any
/// `opType` and `opset` may be given).  Returns false and describes the
/// problem in `error` when the registry fails.
bool lookUpSinceVersion(const std::string &opType, int64_t opset,
                        int64_t &sinceVersion, std::string &error);

} // namespace sharc::onnx_import

#endif // SHARC_FRONTENDS_ONNX_OPSCHEMAS_H
