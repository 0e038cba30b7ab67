#!/usr/bin/env python3
"""Draws the training curves of `--metrics FILE.jsonl` files (the training
binaries' and `sharc eval --train`'s, runtime/Metrics.h) to a PNG: loss,
learning rate, loss scale (or peak memory when no run is loss-scaled) and
throughput against the step, one line per file.

    tools/plot-metrics.py run.jsonl [other.jsonl ...] -o curves.png [--title T]

Needs matplotlib (PyPI; tools/install-deps.sh --test installs it).  The PNG
is written under a temporary name and renamed into place.  A missing or
malformed file is an error naming the file and line (exit status 1)."""

import argparse
import json
import os
import pathlib
import sys
import tempfile


def fail(message):
    print(f"plot-metrics: error: {message}", file=sys.stderr)
    sys.exit(1)


def read_metrics(path):
    """The step records of `path`, in file order (a resumed run appends)."""
    records = []
    try:
        lines = pathlib.Path(path).read_text().splitlines()
    except OSError as error:
        fail(f"{path}: {error.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            fail(f"{path}:{number}: not a JSON line ({error.msg})")
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            fail(f"{path}:{number}: a metrics line has an integer \"step\"")
        records.append(record)
    if not records:
        fail(f"{path}: no metrics lines")
    return records


def series(records, key):
    points = [(r["step"], r[key]) for r in records
              if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return [p[0] for p in points], [p[1] for p in points]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", nargs="+", help="--metrics JSON-lines files")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    runs = [(path, read_metrics(path)) for path in args.metrics]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (pip install matplotlib, or "
             "tools/install-deps.sh --test)")

    scaled = any("scale" in r for _, records in runs for r in records)
    third = ("scale", "loss scale", "log") if scaled else \
        ("peak_memory_bytes", "peak memory (MiB)", "linear")
    figure, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for path, records in runs:
        label = pathlib.Path(path).stem
        steps, loss = series(records, "loss")
        axes[0][0].plot(steps, loss, label=label)
        skipped = [r["step"] for r in records if r.get("skipped")]
        if skipped:
            at = dict(zip(steps, loss))
            axes[0][0].scatter([s for s in skipped if s in at],
                               [at[s] for s in skipped if s in at],
                               marker="x", color="red", zorder=3,
                               label=f"{label}: skipped")
        axes[0][1].plot(*series(records, "lr"), label=label)
        steps, values = series(records, third[0])
        if third[0] == "peak_memory_bytes":
            values = [v / 2**20 for v in values]
        axes[1][0].plot(steps, values, label=label)
        key = "tokens_per_s" if any("tokens_per_s" in r for r in records) \
            else "samples_per_s"
        axes[1][1].plot(*series(records, key), label=f"{label} ({key.replace('_per_s', '/s')})")
    for axis, title in zip(axes.flat, ["loss", "learning rate", third[1],
                                       "throughput"]):
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    axes[1][0].set_yscale(third[2])
    # A loss falling by orders of magnitude reads better on a log scale.
    losses = [r["loss"] for _, records in runs for r in records
              if isinstance(r.get("loss"), (int, float))]
    if losses and min(losses) > 0 and max(losses) > 100 * min(losses):
        axes[0][0].set_yscale("log")
    for axis in axes[1]:
        axis.set_xlabel("step")
    if args.title:
        figure.suptitle(args.title)
    figure.tight_layout()

    output = pathlib.Path(args.output)
    fd, temporary = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp",
                                     dir=output.parent if str(output.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as file:
            figure.savefig(file, format="png", dpi=100)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, output)
    except OSError as error:
        os.unlink(temporary)
        fail(f"{output}: {error.strerror}")
    print(f"plot-metrics: wrote {output} ({len(runs)} run(s), "
          f"{sum(len(r) for _, r in runs)} steps)")


if __name__ == "__main__":
    main()
