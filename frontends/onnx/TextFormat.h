//===- TextFormat.h - ONNX text format, exceptions contained ----*- C++ -*-===//
//
// ONNX's text-format parser may throw C++ exceptions.  TextFormat.cpp is the
// only translation unit built with -fexceptions; it catches everything, so no
// exception crosses into the rest of the importer (built without exceptions).
// This header therefore includes no MLIR or LLVM headers.
//
//===----------------------------------------------------------------------===//

#ifndef SHARC_FRONTENDS_ONNX_TEXTFORMAT_H
#define SHARC_FRONTENDS_ONNX_TEXTFORMAT_H

#include "onnx/onnx_pb.h"

#include <string>

namespace sharc::onnx_import {

/// Parses `text` (ONNX's text format, `#` starts a comment) into `model`.
/// Returns false and describes the problem in `error` when the text is
/// malformed.
bool parseOnnxText(const std::string &text, onnx::ModelProto &model,
                   std::string &error);

} // namespace sharc::onnx_import

#endif // SHARC_FRONTENDS_ONNX_TEXTFORMAT_H
