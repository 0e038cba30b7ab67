//===- TextFormat.cpp - ONNX text format, exceptions contained ------------===//
//
// Built with -fexceptions (see CMakeLists.txt): the ONNX parser throws on
// some malformed literals (std::stoll and friends).
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/TextFormat.h"

#include "onnx/defs/parser.h"

#include <exception>
#include <stdexcept>

bool sharc::onnx_import::parseOnnxText(const std::string &text,
                                       onnx::ModelProto &model,
                                       std::string &error) {
  try {
    onnx::Common::Status status = onnx::OnnxParser::Parse(model, text.c_str());
    if (status.IsOK())
      return true;
    error = status.ErrorMessage();
  } catch (const std::invalid_argument &e) {
    error = std::string("malformed number literal (") + e.what() + ")";
  } catch (const std::out_of_range &e) {
    error = std::string("number literal out of range (") + e.what() + ")";
  } catch (const std::exception &e) {
    error = std::string("the ONNX text parser failed: ") + e.what();
  } catch (...) {
    error = "the ONNX text parser failed";
  }
  return false;
}
