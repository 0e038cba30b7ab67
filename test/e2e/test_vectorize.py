"""Every straight-line kernel of a compiled training step vectorizes on the CPU.

The fused kernels (sharc-fuse's `sharc.fusion` ops, and the grouped optimizer
update) are loops over elements that the host compiler must turn into SIMD
code: a call it cannot inline (glibc's erf, tanh or exp), a branch it cannot
if-convert, or a store it cannot prove independent keeps a loop scalar, several
times slower.  This test builds real models with `sharc compile` and GCC's
vectorizer report (SHARC_HOST_CXXFLAGS=-fdump-tree-vect-optimized=FILE: one
section per function, with a note for every loop it vectorized) and checks,
for every kernel of the emitted source without loops or branches (elementwise
fusions, index maps) that a step launches over more than one element, that
the loop running it (runtime/Kernels.h's
runOnHost, or launchGroup for the optimizer) was vectorized.  It fails in the
other direction too: it finds the kernels from the source, and a kernel whose
loop the report does not mention at all is a failure, not a pass."""

import re

import pytest

import models

KERNEL = re.compile(r"^struct (K\d+) \{\n(.*?)^\};", re.MULTILINE | re.DOTALL)
LAUNCH = re.compile(r"sharc::kern::launch\(ctx, (\d+), \d+, (K\d+)\{")
GROUP_MEMBER = re.compile(r"^\s+(K\d+)\{", re.MULTILINE)
VECTORIZED = "optimized: loop vectorized"
# A kernel with one of these loops or branches inside (a row kernel's sums
# and maxima are runtime/Kernels.h's lane loops) is not a straight line.
LOOPS_AND_BRANCHES = ("for (", "while", "if (", "raise(", "laneSum(", "rowMax(")

def straight_line_kernels(source):
    """{name: body} of the kernels whose only member function is an
    operator() without loops or branches: the elementwise fusions, the
    optimizer update and the index maps (slices, transposes, concats)."""
    found = {}
    for name, body in KERNEL.findall(source):
        functions = re.findall(r"SHARC_HD \w+ (\w+)\(", body)
        if functions != ["operator"]:
            continue
        inside = body.split("const {\n", 1)[1]
        if not any(word in inside for word in LOOPS_AND_BRANCHES):
            found[name] = body
    return found


def report_sections(report):
    """[(function header, vectorized?)] of GCC's report."""
    sections = re.split(r"^;; Function ", report, flags=re.MULTILINE)[1:]
    return [(s.split("\n", 1)[0], VECTORIZED in s) for s in sections]


@pytest.mark.parametrize("name", ["gpt", "bert", "mlp"])
def test_straight_line_kernels_vectorize(sharc, tmp_path, monkeypatch, name):
    case = models.make_training_case(name)
    onnx_path = tmp_path / f"{name}.onnx"
    models.export(case, onnx_path)
    report_path = tmp_path / "vect.txt"
    monkeypatch.setenv("SHARC_HOST_CXXFLAGS",
                       f"-fdump-tree-vect-optimized={report_path}")
    out = tmp_path / "out"
    run = sharc("compile", onnx_path, "--optimizer", "adamw", "-o", out,
                timeout=600)
    assert run.returncode == 0, run.stderr
    source = (out / "program.cpp").read_text()
    report = report_path.read_text()

    kernels = straight_line_kernels(source)
    launched = {}
    for count, kernel in LAUNCH.findall(source):
        launched[kernel] = max(launched.get(kernel, 0), int(count))
    grouped = set(GROUP_MEMBER.findall(source)) - set(launched)
    checked = [k for k in kernels if launched.get(k, 0) > 1 or k in grouped]
    # The models have fused chains (bias + GELU, the residual adds, the
    # optimizer update): a test that found none would check nothing.
    assert len(checked) >= 5, (name, sorted(kernels), launched)

    sections = report_sections(report)
    failures = []
    for kernel in checked:
        loop = (f"launchGroup<{{anonymous}}::{kernel}," if kernel in grouped
                else f"runOnHost<{{anonymous}}::{kernel}>")
        mine = [ok for header, ok in sections
                if loop in header and "<lambda" in header]
        if not mine:
            failures.append(f"{kernel}: its loop is not in the report")
        elif not any(mine):
            failures.append(f"{kernel}: not vectorized:\n{kernels[kernel]}")
    assert not failures, "\n".join(failures)
