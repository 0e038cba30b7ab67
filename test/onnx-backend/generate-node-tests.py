#!/usr/bin/env python3
"""Writes the ONNX node test cases of the onnx package on PATH's python3 (the
test environment's, PyPI's onnx 1.23.2: opsets up to 28) in the layout of
Debian's libonnx-testdata, for sharc-onnx-backend-test --data:

    DIR/CASE/model.onnx
    DIR/CASE/test_data_set_N/input_K.pb, output_K.pb

PyPI's wheel ships the case definitions (onnx/backend/test/case/node), not
their data: each case's model and its inputs and expected outputs (computed
by numpy in the definition) are serialized here, as ONNX's own data
generator does.  Usage: generate-node-tests.py DIR (DIR is replaced)."""

import os
import shutil
import sys

import onnx
import onnx.backend.test.case.node as node_cases
from onnx import TensorProto, numpy_helper

PINNED = "1.23.2"  # tools/requirements-test.txt; excluded-pypi.txt is for it


def serialize(value, info):
    """A case's input or output value as the proto its graph declares."""
    kind = info.type.WhichOneof("value")
    if kind == "sequence_type":
        return numpy_helper.from_list(value, info.name)
    if kind == "optional_type":
        return numpy_helper.from_optional(value, info.name)
    if isinstance(value, TensorProto):
        proto = TensorProto()
        proto.CopyFrom(value)
        proto.name = info.name
        return proto
    return numpy_helper.from_array(value, info.name)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: generate-node-tests.py DIR")
    if onnx.__version__ != PINNED:
        sys.exit(f"generate-node-tests.py: onnx {onnx.__version__} is on "
                 f"PATH's python3, not {PINNED} (run tools/install-deps.sh "
                 "--test and put its environment first on PATH)")
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    count = 0
    for case in node_cases.collect_testcases(None):
        directory = os.path.join(out, case.name)
        os.makedirs(directory)
        with open(os.path.join(directory, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for index, (inputs, outputs) in enumerate(case.data_sets):
            data = os.path.join(directory, f"test_data_set_{index}")
            os.makedirs(data)
            for prefix, values, infos in (("input", inputs, graph.input),
                                          ("output", outputs, graph.output)):
                for k, (value, info) in enumerate(zip(values, infos)):
                    path = os.path.join(data, f"{prefix}_{k}.pb")
                    with open(path, "wb") as f:
                        f.write(serialize(value, info).SerializeToString())
        count += 1
    print(f"generate-node-tests.py: {count} cases of onnx {onnx.__version__} "
          f"in {out}")


if __name__ == "__main__":
    main()
