"""The loss scaler that sharc builds into the training step
(passes/LossScale.h) against DeepSpeed's own DynamicLossScaler (release
0.19.8, deepspeed/runtime/fp16/loss_scaler.py), driven by the same overflow
sequences: hundreds of random ones and a few written to reach each rule
(hysteresis, consecutive hysteresis, growth after a window, the floor at the
minimum scale and DeepSpeed's error there).  After every step the scale, the
hysteresis counter, the step counter and the last overflow step must be
equal, and the run must stop at the same step where DeepSpeed raises."""

import json
import os
import random
import subprocess

import pytest

from conftest import sharc_path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
loss_scaler = pytest.importorskip(
    "deepspeed.runtime.fp16.loss_scaler",
    reason="DeepSpeed is not installed (tools/install-deps.sh --test installs it)")


class _SingleRank:
    """What update_scale asks of torch.distributed: only the rank, for its
    log line."""

    @staticmethod
    def get_rank():
        return 0


def deepspeed_trajectory(options, overflows):
    """DeepSpeed's state after each step, up to the step where it raises."""
    loss_scaler.dist = _SingleRank
    scaler = loss_scaler.DynamicLossScaler(
        init_scale=options["initial_scale"],
        scale_window=options["window"],
        min_scale=options["min_scale"],
        delayed_shift=options["hysteresis"],
        consecutive_hysteresis=options["consecutive_hysteresis"])
    steps = []
    for overflow in overflows:
        try:
            scaler.update_scale(overflow)
        except Exception as error:  # DeepSpeed raises a bare Exception.
            assert "already at minimum" in str(error)
            steps.append({"at_minimum": True})
            break
        steps.append({"scale": float(scaler.cur_scale),
                      "hysteresis": scaler.cur_hysteresis,
                      "iter": scaler.cur_iter,
                      "last_overflow": scaler.last_overflow_iter,
                      "at_minimum": False})
    return steps


def sharc_trajectories(cases, tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    binary = sharc_path().parent / "sharc-loss-scale-check"
    assert binary.is_file(), f"{binary} not built"
    run = subprocess.run([binary, path], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def random_cases(generator, count):
    cases = []
    for _ in range(count):
        options = {
            "initial_scale": 2.0 ** generator.randint(0, 20),
            "window": generator.choice([1, 2, 3, 5, 8]),
            "min_scale": generator.choice([1.0, 1.0, 0.25, 4.0, 3.0]),
            "hysteresis": generator.choice([1, 2, 3]),
            "consecutive_hysteresis": generator.random() < 0.5,
        }
        rate = generator.choice([0.05, 0.2, 0.5, 0.8])
        sequences = [[generator.random() < rate
                      for _ in range(generator.randint(1, 60))]
                     for _ in range(3)]
        cases.append({"options": options, "sequences": sequences})
    return cases


def written_cases():
    """Sequences that walk through each rule on purpose."""
    base = {"initial_scale": 8.0, "window": 2, "min_scale": 1.0,
            "hysteresis": 2, "consecutive_hysteresis": False}
    grow = [False] * 7
    spend_then_halve = [True, True, False, True]
    to_the_floor = [True] * 10
    refill = [True, False, True, False, True]
    sequences = [grow, spend_then_halve, to_the_floor, refill]
    return [{"options": dict(base, consecutive_hysteresis=consecutive,
                             hysteresis=hysteresis),
             "sequences": sequences}
            for consecutive in (False, True) for hysteresis in (1, 2, 3)]


def test_scaler_matches_deepspeed(tmp_path):
    generator = random.Random(20261201)
    cases = written_cases() + random_cases(generator, 120)
    ours = sharc_trajectories(cases, tmp_path)
    assert len(ours) == len(cases)
    compared = raised = 0
    for case, trajectories in zip(cases, ours):
        for overflows, steps in zip(case["sequences"], trajectories):
            expected = deepspeed_trajectory(case["options"], overflows)
            assert len(steps) == len(expected), (case["options"], overflows)
            for index, (got, want) in enumerate(zip(steps, expected)):
                if want["at_minimum"]:
                    assert got["at_minimum"], (case["options"], overflows, index)
                    raised += 1
                    continue
                assert got == want, (case["options"], overflows, index)
                compared += 1
    # The sequences reach every rule: many steps, and DeepSpeed's error.
    assert compared > 2000 and raised > 10, (compared, raised)


def test_the_comparison_can_fail(tmp_path):
    """A scaler with another window is told apart: the check is not vacuous."""
    case = written_cases()[1]
    ours = sharc_trajectories([case], tmp_path)[0]
    other = dict(case["options"], window=case["options"]["window"] + 1)
    differs = any(steps != deepspeed_trajectory(other, overflows)
                  for overflows, steps in zip(case["sequences"], ours))
    assert differs
