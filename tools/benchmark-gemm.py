#!/usr/bin/env python3
"""Benchmark: single-precision GEMM libraries on the GEMMs of a GPT training step.

A benchmark, not a test: it checks nothing but each product's accuracy and
only prints numbers.  The GEMMs are most of sharc's CPU step (docs/performance.md),
so the library that multiplies is the step's speed.  For the GPT of
test/e2e/models.py at the given sizes it lists the step's products (forward
X W, backward dY W^T and X^T dY of every linear layer, the attention's
Q K^T and P V per batch row and head, and their gradients) and times
`cblas_sgemm` on each in every library it finds, each in a process of its
own, at --threads threads (default 1: sharc calls the library single-threaded
from its own thread pool):

  openblas-debian   Debian's OpenBLAS (libopenblas.so.0), the one sharc links,
                    with the kernels sharc makes it choose (runtime/Blas.h)
  openblas-wheel    a newer OpenBLAS: PyPI's scipy-openblas32
  blis              Debian's BLIS (libblis4-pthread)
  mkl               Intel MKL: PyPI's mkl wheel (libmkl_rt)

A library that is not installed is reported and left out.  To install them
all next to the test tools:

    apt-get install libblis4-pthread
    python3 -m venv /tmp/gemm && /tmp/gemm/bin/pip install numpy mkl scipy-openblas32
    /tmp/gemm/bin/python tools/benchmark-gemm.py --dim 256 --layers 4 --heads 4 --seq 128 --batch 8 --vocab 512

It prints, per product shape, the GFLOP/s of each library, and the time the
whole step's GEMMs take in each (the sum over products of their count times
their median time) with its ratio to Debian's OpenBLAS.
"""

import argparse
import ctypes
import ctypes.util
import glob
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def find_libraries():
    """{name: (path, symbol prefix)} of the libraries present."""
    found = {}
    debian = ctypes.util.find_library("openblas")
    if debian:
        found["openblas-debian"] = (debian, "")
    try:
        import scipy_openblas32
        lib_dir = pathlib.Path(scipy_openblas32.get_lib_dir())
        candidates = sorted(lib_dir.glob("libscipy_openblas*.so*"))
        if candidates:
            found["openblas-wheel"] = (str(candidates[0]), "scipy_")
    except ImportError:
        pass
    for path in ("/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4",
                 "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4"):
        if os.path.exists(path):
            found["blis"] = (path, "")
            break
    for prefix in (sys.prefix, sys.base_prefix):
        candidates = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if candidates:
            found["mkl"] = (candidates[0], "")
            break
    return found


def products(args):
    """[(label, transA, transB, M, N, K, count)] of one training step."""
    tokens, d, h = args.batch * args.seq, args.dim, args.heads
    dh, t = d // h, args.seq
    heads = args.batch * h
    out = []

    def linear(label, k, n, count):
        # Y[tokens, n] = X[tokens, k] W[k, n]; dX = dY W^T; dW = X^T dY.
        out.append((f"{label} forward", NO_TRANS, NO_TRANS, tokens, n, k, count))
        out.append((f"{label} dX", NO_TRANS, TRANS, tokens, k, n, count))
        out.append((f"{label} dW", TRANS, NO_TRANS, k, n, tokens, count))

    layers = args.layers
    linear("qkv", d, 3 * d, layers)
    linear("attention out", d, d, layers)
    linear("mlp up", d, 4 * d, layers)
    linear("mlp down", 4 * d, d, layers)
    linear("head", d, args.vocab, 1)
    # Per batch row and head: S = Q K^T [t, t], O = P V [t, dh], and their
    # gradients dQ = dS K, dK = dS^T Q, dP = dO V^T, dV = P^T dO.
    n = layers * heads
    out.append(("Q K^T", NO_TRANS, TRANS, t, t, dh, n))
    out.append(("P V", NO_TRANS, NO_TRANS, t, dh, t, n))
    out.append(("dS K", NO_TRANS, NO_TRANS, t, dh, t, n))
    out.append(("dS^T Q", TRANS, NO_TRANS, t, dh, t, n))
    out.append(("dO V^T", NO_TRANS, TRANS, t, t, dh, n))
    out.append(("P^T dO", TRANS, NO_TRANS, t, dh, t, n))
    return out


def describe(lib, name, prefix):
    """The library's own account of its version and kernels."""
    def call(symbol, restype=ctypes.c_char_p):
        try:
            fn = getattr(lib, prefix + symbol)
        except AttributeError:
            return None
        fn.restype = restype
        return fn()
    if name.startswith("openblas"):
        config = call("openblas_get_config")
        core = call("openblas_get_corename")
        return f"{(config or b'').decode()}; core {(core or b'?').decode()}"
    if name == "blis":
        version = call("bli_info_get_version_str")
        arch = call("bli_arch_query_id", ctypes.c_int)
        if arch is not None:
            string = getattr(lib, "bli_arch_string", None)
            if string:
                string.restype = ctypes.c_char_p
                string.argtypes = [ctypes.c_int]
                return f"BLIS {(version or b'?').decode()}; kernels {string(arch).decode()}"
        return f"BLIS {(version or b'?').decode()}"
    if name == "mkl":
        buf = ctypes.create_string_buffer(256)
        try:
            lib.MKL_Get_Version_String(buf, 256)
            return buf.value.decode().strip()
        except AttributeError:
            return "MKL"
    return name


def set_threads(lib, name, prefix, threads):
    for symbol in ("openblas_set_num_threads", "bli_thread_set_num_threads",
                   "MKL_Set_Num_Threads"):
        fn = getattr(lib, prefix + symbol, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int] if symbol != "bli_thread_set_num_threads" \
                else [ctypes.c_long]
            fn(threads)
            return


def worker(spec):
    """Times every product in one library; prints one JSON line."""
    import numpy as np
    path, prefix, name = spec["path"], spec["prefix"], spec["name"]
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    set_threads(lib, name, prefix, spec["threads"])
    sgemm = getattr(lib, prefix + "cblas_sgemm")
    sgemm.restype = None
    f, i, p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
    sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    rng = np.random.default_rng(0)
    results = []
    for label, ta, tb, m, n, k, count in spec["products"]:
        a = rng.standard_normal((k, m) if ta == TRANS else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb == TRANS else (k, n), dtype=np.float32)
        c = np.zeros((m, n), dtype=np.float32)
        lda, ldb = a.shape[1], b.shape[1]

        # One call, or one per block of rows of C as sharc cuts products
        # (--row-block); row r of op(A) is column r of A when transposed.
        block = spec["row_block"] or m
        cuts = [(r, min(block, m - r)) for r in range(0, m, block)]

        def run():
            for row, rows in cuts:
                offset = row if ta == TRANS else row * lda
                sgemm(ROW_MAJOR, ta, tb, rows, n, k, 1.0, a.ctypes.data + 4 * offset,
                      lda, b.ctypes.data, ldb, 0.0, c.ctypes.data + 4 * row * n, n)
        run()
        ref = (a.T if ta == TRANS else a).astype(np.float64) @ \
            (b.T if tb == TRANS else b).astype(np.float64)
        error = float(np.max(np.abs(c - ref)) / max(np.max(np.abs(ref)), 1e-30))
        # Repeat until 0.1 s, three times; the median of the per-call times.
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.02:
            run()
            calls += 1
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(max(calls * 5, 1)):
                run()
            samples.append((time.perf_counter() - start) / max(calls * 5, 1))
        results.append({"label": label, "seconds": statistics.median(samples),
                        "error": error})
    print(json.dumps({"about": describe(lib, name, prefix), "results": results}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--row-block", type=int, default=0, metavar="ROWS",
                        help="cut each product into calls of at most ROWS rows of C, "
                             "as sharc's host GEMM does (runtime/Gemm.h, gemmRowBlock); "
                             "default: one call per product")
    parser.add_argument("--libraries", default="",
                        help="comma-separated subset of the names above (default: all found)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    found = find_libraries()
    wanted = [n for n in args.libraries.split(",") if n] or \
        ["openblas-debian", "openblas-wheel", "blis", "mkl"]
    for name in wanted:
        if name not in found:
            print(f"{name}: not installed, left out (see --help)")
    names = [n for n in wanted if n in found]
    if not names:
        sys.exit("benchmark-gemm: no library found")
    prods = products(args)
    env = dict(os.environ)
    # Each library's own threads, and nothing else's.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "BLIS_NUM_THREADS"):
        env[var] = str(args.threads)
    # The kernels sharc's start-up check chooses for Debian's OpenBLAS.
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    timings, about = {}, {}
    for name in names:
        path, prefix = found[name]
        spec = {"path": path, "prefix": prefix, "name": name,
                "threads": args.threads, "products": prods,
                "row_block": args.row_block}
        run = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{name}: failed ({run.returncode}): {run.stderr.strip()[-400:]}")
            continue
        data = json.loads(run.stdout.strip().splitlines()[-1])
        timings[name] = {r["label"]: r for r in data["results"]}
        about[name] = data["about"]
        print(f"{name}: {path}: {about[name]}", flush=True)
    names = [n for n in names if n in timings]
    print()
    print(f"GPT d {args.dim}, {args.layers} layers, {args.heads} heads, T {args.seq}, "
          f"batch {args.batch}, vocab {args.vocab}; {args.threads} thread(s); "
          f"cblas_sgemm, row-major, "
          f"{f'calls of at most {args.row_block} rows' if args.row_block else 'one call per product'}, "
          f"median of 3 timed runs")
    print("| product | M x N x K | transposed | count | " +
          " | ".join(f"{n} GFLOP/s" for n in names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    totals = {n: 0.0 for n in names}
    flops_total = 0.0
    for label, ta, tb, m, n, k, count in prods:
        flops = 2.0 * m * n * k
        flops_total += flops * count
        row = []
        for name in names:
            r = timings[name][label]
            totals[name] += r["seconds"] * count
            row.append(f"{flops / r['seconds'] / 1e9:.1f}")
            if r["error"] > 1e-4:
                row[-1] += f" (error {r['error']:.1e})"
        trans = ("A" if ta == TRANS else "") + ("B" if tb == TRANS else "")
        print(f"| {label} | {m} x {n} x {k} | {trans or '-'} | {count} | " +
              " | ".join(row) + " |")
    base = totals.get("openblas-debian")
    print()
    print(f"the step's GEMMs: {flops_total / 1e9:.2f} GFLOP")
    for name in names:
        ratio = f", {base / totals[name]:.2f}x openblas-debian's speed" if base else ""
        print(f"{name}: {totals[name] * 1e3:.1f} ms "
              f"({flops_total / totals[name] / 1e9:.1f} GFLOP/s){ratio}")


if __name__ == "__main__":
    main()
