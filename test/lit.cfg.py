# -*- Python -*-
# lit configuration for sharc's FileCheck suites.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "sharc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.sharc_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "unit", "e2e", "onnx-backend", "models", "fuzz", "Inputs"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.sharc_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
config.substitutions.append(("%python", config.python_executable))
