#!/usr/bin/env python3
"""Draws the training curves of `--metrics FILE.jsonl` files (the training
binaries' and `sharc eval --train`'s, runtime/Metrics.h) to a PNG: loss,
learning rate, gradient norm, loss scale (for loss-scaled runs), peak memory
(where measured) and throughput against the step, one line per file.

    tools/plot-metrics.py run.jsonl [other.jsonl ...] -o curves.png [--title T]

A csv_monitor folder (OUTPUT_PATH/JOB_NAME of the config's csv_monitor
block) is read as a run too.

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


# csv_monitor's events (docs/config.md) and the --metrics keys they hold.
CSV_EVENTS = {"train_loss": "loss", "lr": "lr", "loss_scale": "scale",
              "grad_norm": "grad_norm", "tokens_per_s": "tokens_per_s",
              "samples_per_s": "samples_per_s",
              "peak_memory_bytes": "peak_memory_bytes"}


def read_csv_monitor(folder):
    """The step records of a csv_monitor folder (OUTPUT_PATH/JOB_NAME): its
    Train_Samples_*.csv files, whose rows are (samples trained, value).  The
    step of a row is its samples over the global batch (the samples of the
    first loss row); the learning rate and the scale are written after the
    step they follow, so their rows belong to the next step."""
    import csv
    columns = {}
    for name, key in CSV_EVENTS.items():
        path = pathlib.Path(folder) / f"Train_Samples_{name}.csv"
        if not path.exists():
            continue
        try:
            with path.open(newline="") as file:
                rows = list(csv.reader(file))
        except OSError as error:
            fail(f"{path}: {error.strerror}")
        if not rows or rows[0] != ["step", name]:
            fail(f"{path}:1: not a csv_monitor file (header 'step,{name}')")
        points = []
        for number, row in enumerate(rows[1:], 2):
            try:
                points.append((int(row[0]), float(row[1])))
            except (ValueError, IndexError):
                fail(f"{path}:{number}: not a row 'samples,value'")
        columns[key] = points
    if not columns.get("loss"):
        fail(f"{folder}: no Train_Samples_train_loss.csv rows (a csv_monitor "
             "folder holds them)")
    batch = columns["loss"][0][0]
    records = {}
    for key, points in columns.items():
        shift = 1 if key in ("lr", "scale") else 0
        for samples, value in points:
            step = samples // batch + shift
            records.setdefault(step, {"step": step})[key] = value
    return [records[step] for step in sorted(records)]


def read_metrics(path):
    """The step records of `path`, in file order (a resumed run appends), or
    of a csv_monitor folder."""
    if pathlib.Path(path).is_dir():
        return read_csv_monitor(path)
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
    parser.add_argument("metrics", nargs="+",
                        help="--metrics JSON-lines files or csv_monitor folders")
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

    # The panels: loss, learning rate, gradient norm (where a run has one),
    # loss scale (where a run is loss-scaled), peak memory (where measured)
    # and throughput.
    def has(key):
        return any(key in r for _, records in runs for r in records)

    panels = [("loss", "loss"), ("lr", "learning rate")]
    if has("grad_norm"):
        panels.append(("grad_norm", "gradient norm"))
    if has("scale"):
        panels.append(("scale", "loss scale"))
    if has("peak_memory_bytes"):
        panels.append(("peak_memory_bytes", "peak memory (MiB)"))
    panels.append(("throughput", "throughput"))
    columns = 2
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(10, 3.5 * rows),
                                sharex=True, squeeze=False)
    flat = list(axes.flat)
    for path, records in runs:
        label = pathlib.Path(path).stem
        for axis, (key, _) in zip(flat, panels):
            if key == "throughput":
                key = "tokens_per_s" if any("tokens_per_s" in r
                                            for r in records) \
                    else "samples_per_s"
                axis.plot(*series(records, key),
                          label=f"{label} ({key.replace('_per_s', '/s')})")
                continue
            steps, values = series(records, key)
            if key == "peak_memory_bytes":
                values = [v / 2**20 for v in values]
            axis.plot(steps, values, label=label)
            skipped = [r["step"] for r in records if r.get("skipped")]
            if key == "loss" and skipped:
                at = dict(zip(steps, values))
                axis.scatter([s for s in skipped if s in at],
                             [at[s] for s in skipped if s in at],
                             marker="x", color="red", zorder=3,
                             label=f"{label}: skipped")
    for axis, (key, title) in zip(flat, panels):
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
        if key == "scale":
            axis.set_yscale("log")
    for index in range(len(panels), len(flat)):
        flat[index].set_visible(False)
        # The panel above an empty one carries the step axis.
        flat[index - columns].xaxis.set_tick_params(labelbottom=True)
        flat[index - columns].set_xlabel("step")
    # A loss falling by orders of magnitude reads better on a log scale.
    losses = [r["loss"] for _, records in runs for r in records
              if isinstance(r.get("loss"), (int, float))]
    if losses and min(losses) > 0 and max(losses) > 100 * min(losses):
        flat[0].set_yscale("log")
    for axis in axes[-1]:
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
