//===- OpSchemas.cpp - ONNX's operator schemas, exceptions contained ------===//
//
// Built with -fexceptions (see CMakeLists.txt): schema.h uses exceptions,
// and building the registry on first use allocates.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OpSchemas.h"

#include "onnx/defs/schema.h"

#include <climits>
#include <exception>

bool sharc::onnx_import::lookUpSinceVersion(const std::string &opType,
                                            int64_t opset,
                                            int64_t &sinceVersion,
                                            std::string &error) {
  sinceVersion = 0;
  if (opset < 1 || opset > INT_MAX)
    return true;
  try {
    const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
        opType, static_cast<int>(opset), onnx::ONNX_DOMAIN);
    if (schema)
      sinceVersion = schema->since_version();
    return true;
  } catch (const std::exception &e) {
    error = std::string("ONNX's schema registry failed: ") + e.what();
  } catch (...) {
    error = "ONNX's schema registry failed";
  }
  return false;
}
