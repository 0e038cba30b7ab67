"""DeepSpeed configs (`sharc eval --train --config ds_config.json`).

Every kind of config error documented in docs/config.md exits with status 1
and a message that names the file, the key's full path and what is wrong; a
valid config trains exactly like the same settings given as flags, and flags
override the config.
"""

import copy
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import models
from conftest import sharc_path


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """(model path, --input args, work directory): the MLP, whose
    micro-batch (dim 0 of input 'x') is 8, and 20 rows of data."""
    case = models.make_case("mlp")
    directory = tmp_path_factory.mktemp("config")
    path = directory / "mlp.onnx"
    models.export(case, path)
    import torch

    data = models.make_inputs("mlp", 20, torch.Generator().manual_seed(5))
    args = []
    for name, tensor in data.items():
        np.save(directory / f"{name}.npy", tensor.numpy())
        args += ["--input", f"{name}={directory / f'{name}.npy'}"]
    return path, args, directory


def train(sharc, mlp, *flags, config=None, steps=3):
    """Runs 3 training steps with `flags` and, if given, `config` (a dict
    written as JSON, or raw text)."""
    path, inputs, directory = mlp
    args = ["eval", path, "--train", "--steps", steps, *inputs, *flags]
    if config is not None:
        config_path = directory / "ds_config.json"
        text = config if isinstance(config, str) else json.dumps(config, indent=2)
        config_path.write_text(text)
        args += ["--config", config_path]
    return sharc(*args)


def assert_error(result, *fragments):
    """Exit status 1 and a message holding every fragment, no crash."""
    message = result.stderr
    assert result.returncode == 1, (
        f"exit status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{message}")
    assert message.startswith("sharc: error: "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert "Stack dump" not in message and "PLEASE submit" not in message, message


# Each case: config, then fragments the message must contain.
CONFIG_ERRORS = {
    "inconsistent-batch-sizes": (
        {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
         "gradient_accumulation_steps": 2},
        ["inconsistent batch sizes", "train_batch_size 32",
         "train_micro_batch_size_per_gpu 8", "gradient_accumulation_steps 2",
         "world size 1"],
    ),
    "derived-micro-batch-differs-from-model": (
        {"train_batch_size": 32, "gradient_accumulation_steps": 2},
        ["inconsistent batch sizes", "micro-batch of 16",
         "the model's micro-batch (dim 0 of input 'x') is 8"],
    ),
    "micro-batch-differs-from-model": (
        {"train_micro_batch_size_per_gpu": 4},
        ["train_micro_batch_size_per_gpu is 4",
         "the model's micro-batch (dim 0 of input 'x') is 8"],
    ),
    "train-batch-not-a-multiple": (
        {"train_batch_size": 12},
        ["train_batch_size 12 is not a multiple of the micro-batch 8",
         "gradient_accumulation_steps cannot be derived"],
    ),
    "unknown-key-with-suggestion": (
        {"gradient_acumulation_steps": 2},
        ["ds_config.json:2:3: gradient_acumulation_steps: unknown key",
         "did you mean 'gradient_accumulation_steps'?"],
    ),
    "unknown-nested-key-with-suggestion": (
        {"optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}},
        ["optimizer.params.weight_decy: unknown key",
         "did you mean 'weight_decay'?", "known keys: lr, betas"],
    ),
    "unknown-scheduler-key": (
        {"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lrr": 0.1}}},
        ["scheduler.params.warmup_max_lrr: unknown key", "for WarmupLR",
         "did you mean 'warmup_max_lr'?"],
    ),
    "parameter-of-another-optimizer": (
        {"optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.99]}}},
        ["optimizer.params.betas", "is an Adam parameter; SGD takes: lr"],
    ),
    "unknown-optimizer": (
        {"optimizer": {"type": "AdamW2"}},
        ["optimizer.type: unknown optimizer 'AdamW2'", "did you mean 'AdamW'?"],
    ),
    "optimizer-not-supported-yet": (
        {"optimizer": {"type": "Lamb"}},
        ["optimizer.type: optimizer 'Lamb' is not supported yet"],
    ),
    "unknown-scheduler": (
        {"scheduler": {"type": "WarmupCosine"}},
        ["scheduler.type: unknown scheduler 'WarmupCosine'",
         "did you mean 'WarmupCosineLR'?"],
    ),
    "wrong-type": (
        {"optimizer": {"type": "AdamW", "params": {"betas": "0.9,0.999"}}},
        ["optimizer.params.betas: expected an array of two numbers in [0, 1)",
         'got "0.9,0.999" (a string)'],
    ),
    "wrong-type-integer": (
        {"train_batch_size": 8.5},
        ["train_batch_size: expected an integer >= 1, got 8.5"],
    ),
    "huggingface-auto": (
        {"train_batch_size": "auto"},
        ["train_batch_size: expected an integer >= 1", "Hugging Face"],
    ),
    "out-of-range": (
        {"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}},
        ["optimizer.params.betas[1]: expected a number in [0, 1), got 1.0"],
    ),
    "out-of-range-clipping": (
        {"gradient_clipping": -1},
        ["gradient_clipping: expected a number >= 0, got -1"],
    ),
    "missing-required-scheduler-parameter": (
        {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5}}},
        ["scheduler.params: WarmupDecayLR requires 'total_num_steps'"],
    ),
    "zero-stage-out-of-range": (
        {"zero_optimization": {"stage": 4}},
        ["zero_optimization.stage: expected an integer in [0, 3], got 4"],
    ),
    "steps-per-print-not-supported-yet": (
        {"steps_per_print": 10},
        ["steps_per_print: not supported yet"],
    ),
    # activation_checkpointing (DeepSpeed 0.19.8's
    # DeepSpeedActivationCheckpointingConfig): every key checked, keys that
    # are on and without a meaning here refused with the reason.
    "activation-checkpointing-misspelt": (
        {"activation_checkpointing": {"partitioned_activations": True}},
        ["activation_checkpointing.partitioned_activations: unknown key; did "
         "you mean 'partition_activations'?"],
    ),
    "activation-checkpointing-partition-not-a-boolean": (
        {"activation_checkpointing": {"partition_activations": "yes"}},
        ["activation_checkpointing.partition_activations: expected a boolean"],
    ),
    "activation-checkpointing-synchronized": (
        {"activation_checkpointing": {"synchronize_checkpoint_boundary": True}},
        ["activation_checkpointing.synchronize_checkpoint_boundary: has no "
         "meaning in a compiled step"],
    ),
    "activation-checkpointing-profiled": (
        {"activation_checkpointing": {"profile": True}},
        ["activation_checkpointing.profile: not supported"],
    ),
    "activation-checkpointing-no-checkpoints": (
        {"activation_checkpointing": {"number_checkpoints": 0}},
        ["activation_checkpointing.number_checkpoints: expected an integer >= 1, got 0"],
    ),
    # csv_monitor (DeepSpeed 0.19.8's CSVConfig): every key checked.
    "csv-monitor-misspelt": (
        {"csv_monitor": {"enabled": True, "output_dir": "logs"}},
        ["csv_monitor.output_dir: unknown key (known keys: enabled, "
         "output_path, job_name)"],
    ),
    "csv-monitor-enabled-not-a-boolean": (
        {"csv_monitor": {"enabled": "yes"}},
        ["csv_monitor.enabled: expected a boolean"],
    ),
    "csv-monitor-job-name-empty": (
        {"csv_monitor": {"enabled": True, "job_name": ""}},
        ["csv_monitor.job_name: must not be empty"],
    ),
    "wandb-needs-the-network": (
        {"wandb": {"enabled": True, "project": "p"}},
        ["wandb: not supported: Weights & Biases logs to its network service",
         "csv_monitor", "--metrics"],
    ),
    "activation-checkpointing-not-an-object": (
        {"activation_checkpointing": True},
        ["activation_checkpointing: expected an object"],
    ),
    "overlap-comm-not-a-boolean": (
        {"zero_optimization": {"stage": 0, "overlap_comm": "yes"}},
        ["zero_optimization.overlap_comm: expected a boolean"],
    ),
    # fp16 and bf16 (DeepSpeed 0.19.8's DeepSpeedFP16Config and
    # DeepSpeedBF16Config): every key is checked, also while disabled.
    "fp16-unknown-key": (
        {"fp16": {"enabled": False, "loss_scale_windw": 100}},
        ["fp16.loss_scale_windw: unknown key; did you mean 'loss_scale_window'?"],
    ),
    "fp16-window-zero": (
        {"fp16": {"loss_scale_window": 0}},
        ["fp16.loss_scale_window: expected an integer >= 1, got 0"],
    ),
    "fp16-negative-loss-scale": (
        {"fp16": {"loss_scale": -1}},
        ["fp16.loss_scale: expected a number >= 0, got -1"],
    ),
    "fp16-initial-scale-power-too-large": (
        {"fp16": {"initial_scale_power": 65}},
        ["fp16.initial_scale_power: expected an integer in [0, 64], got 65"],
    ),
    "fp16-fractional-hysteresis": (
        {"fp16": {"hysteresis": 1.5}},
        ["fp16.hysteresis: expected an integer >= 1, got 1.5"],
    ),
    "fp16-boolean-min-loss-scale": (
        {"fp16": {"min_loss_scale": True}},
        ["fp16.min_loss_scale: expected an integer >= 1, got true"],
    ),
    "fp16-auto-cast": (
        {"fp16": {"enabled": False, "auto_cast": True}},
        ["fp16.auto_cast: not supported"],
    ),
    "fp16-master-weights-in-fp16": (
        {"fp16": {"fp16_master_weights_and_grads": True}},
        ["fp16.fp16_master_weights_and_grads: not supported (master weights stay fp32)"],
    ),
    "bf16-unknown-key": (
        {"bf16": {"enabled": False, "check_grad_overflw": True}},
        ["bf16.check_grad_overflw: unknown key; did you mean 'check_grad_overflow'?"],
    ),
    "bf16-master-weights-in-bf16": (
        {"bf16": {"bf16_master_weights_and_grads": True}},
        ["bf16.bf16_master_weights_and_grads: not supported"],
    ),
    "bf16-not-a-boolean": (
        {"bf16": {"enabled": "yes"}},
        ["bf16.enabled: expected a boolean (true or false)"],
    ),
    "fp16-and-bf16": (
        {"fp16": {"enabled": True}, "bf16": {"enabled": True}},
        ["bf16: bfloat16 and fp16 modes cannot be simultaneously enabled"],
    ),
    "zero-unknown-key": (
        {"zero_optimization": {"stage": 0, "reduce_bucket_sizee": 5000}},
        ["zero_optimization.reduce_bucket_sizee: unknown key; did you mean "
         "'reduce_bucket_size'?"],
    ),
    # ZeRO-Offload (zero_optimization.offload_optimizer / offload_param):
    # every key of DeepSpeed's blocks is checked; the CPU is accepted (on the
    # CPU target it changes nothing), and NVMe for the optimizer state.
    "zero-offload-optimizer-at-stage-0": (
        {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}},
        ["zero_optimization.offload_optimizer (--offload-optimizer) needs ZeRO stage 1, 2 or 3",
         "this run is at stage 0"],
    ),
    "zero-offload-param-below-stage-3": (
        {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
        ["zero_optimization.offload_param (--offload-param) needs ZeRO stage 3",
         "this run is at stage 2"],
    ),
    "zero-offload-params-misspelt": (
        {"zero_optimization": {"stage": 2,
                               "offload_params": {"device": "cpu", "pin_memory": True}}},
        ["zero_optimization.offload_params: unknown key; did you mean 'offload_param'?"],
    ),
    "zero-offload-inner-key-misspelt": (
        {"zero_optimization": {"stage": 2,
                               "offload_optimizer": {"device": "cpu", "pin_memroy": True}}},
        ["zero_optimization.offload_optimizer.pin_memroy: unknown key; did you mean "
         "'pin_memory'?"],
    ),
    # NVMe offload (DeepSpeed 0.19.8's keys): the folder is required.
    "zero-offload-nvme-without-path": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}},
        ["ds_config.json:4:5: zero_optimization.offload_optimizer.nvme_path: required "
         'with device "nvme": the folder under which each rank keeps its offloaded '
         "optimizer state"],
    ),
    "zero-offload-nvme-null-path": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                                                                 "nvme_path": None}}},
        ["ds_config.json:6:7: zero_optimization.offload_optimizer.nvme_path: required "
         'with device "nvme"'],
    ),
    "zero-offload-nvme-path-not-a-string": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                                                                 "nvme_path": 5}}},
        ["zero_optimization.offload_optimizer.nvme_path: expected a string, got 5"],
    ),
    "zero-offload-nvme-path-empty": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                                                                 "nvme_path": ""}}},
        ['zero_optimization.offload_optimizer.nvme_path: expected the path of a folder, '
         'got ""'],
    ),
    "zero-offload-nvme-path-with-nul": (
        '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", '
        '"nvme_path": "/nvme\\u0000x"}}}',
        ["zero_optimization.offload_optimizer.nvme_path: a path cannot hold the "
         "character NUL"],
    ),
    "zero-offload-param-nvme-without-path": (
        {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}},
        ['zero_optimization.offload_param.nvme_path: required with device "nvme": '
         "the folder under which each rank keeps its offloaded parameters"],
    ),
    # sharc keeps a rank's files in one folder.
    "zero-offload-two-nvme-paths": (
        {"zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme/a"},
            "offload_param": {"device": "nvme", "nvme_path": "/nvme/b"}}},
        ["zero_optimization.offload_param.nvme_path: '/nvme/b' is not "
         "zero_optimization.offload_optimizer.nvme_path ('/nvme/a'): sharc keeps a "
         "rank's offloaded parameters and optimizer state in one folder"],
    ),
    "zero-offload-pipeline-read-not-boolean": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {
            "device": "nvme", "nvme_path": "/local_nvme", "pipeline_read": "yes"}}},
        ["zero_optimization.offload_optimizer.pipeline_read: expected a boolean"],
    ),
    "zero-offload-pipeline-write-null": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {
            "device": "nvme", "nvme_path": "/local_nvme", "pipeline_write": None}}},
        ["zero_optimization.offload_optimizer.pipeline_write: expected a boolean"],
    ),
    "zero-offload-buffer-count-negative": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {
            "device": "nvme", "nvme_path": "/local_nvme", "buffer_count": -1}}},
        ["zero_optimization.offload_optimizer.buffer_count: expected an integer in [0, "],
    ),
    "zero-sub-group-size-zero": (
        {"zero_optimization": {"stage": 0, "sub_group_size": 0}},
        ["zero_optimization.sub_group_size: expected an integer in [1, 1.09951e+12], got 0"],
    ),
    "zero-sub-group-size-too-large": (
        {"zero_optimization": {"stage": 3, "sub_group_size": 2 ** 41}},
        ["zero_optimization.sub_group_size: expected an integer in [1, 1.09951e+12], "
         "got 2199023255552"],
    ),
    "zero-sub-group-size-fractional": (
        {"zero_optimization": {"stage": 1, "sub_group_size": 1.5}},
        ["zero_optimization.sub_group_size: expected an integer in [1, 1.09951e+12], got 1.5"],
    ),
    # The aio block (DeepSpeed 0.19.8's get_aio_config), whatever the device.
    "aio-not-an-object": (
        {"aio": 8},
        ["aio: expected an object, got 8 (a number)"],
    ),
    "aio-misspelt-block": (
        {"aios": {"block_size": 4096}},
        ["aios: unknown key; did you mean 'aio'?"],
    ),
    "aio-unknown-key": (
        {"aio": {"blok_size": 4096}},
        ["ds_config.json:3:5: aio.blok_size: unknown key; did you mean 'block_size'? "
         "(known keys: block_size, queue_depth, intra_op_parallelism, single_submit, "
         "overlap_events, use_gds)"],
    ),
    "aio-block-size-misaligned": (
        {"aio": {"block_size": 1000}},
        ["aio.block_size: expected a multiple of 4096 bytes, got 1000: NVMe offload reads "
         "and writes with O_DIRECT, whose requests must be aligned to 4096 bytes"],
    ),
    "aio-block-size-zero": (
        {"aio": {"block_size": 0}},
        ["aio.block_size: expected a multiple of 4096 bytes, got 0", "O_DIRECT"],
    ),
    "aio-block-size-too-large": (
        {"aio": {"block_size": 2 ** 31}},
        ["aio.block_size: expected at most 1073741824 bytes (1 GiB) per request, "
         "got 2147483648"],
    ),
    "aio-block-size-not-an-integer": (
        {"aio": {"block_size": "1M"}},
        ['aio.block_size: expected an integer (bytes), got "1M" (a string)'],
    ),
    "aio-queue-depth-zero": (
        {"aio": {"queue_depth": 0}},
        ["aio.queue_depth: expected an integer in [1, 4096], got 0"],
    ),
    "aio-queue-depth-too-deep": (
        {"aio": {"queue_depth": 5000}},
        ["aio.queue_depth: expected an integer in [1, 4096], got 5000"],
    ),
    "aio-intra-op-parallelism": (
        {"aio": {"intra_op_parallelism": 4}},
        ["aio.intra_op_parallelism: not supported: sharc submits every request of a "
         "transfer to one io_uring queue; its parallelism is queue_depth (only 1 is "
         "accepted, got 4)"],
    ),
    "aio-intra-op-parallelism-zero": (
        {"aio": {"intra_op_parallelism": 0}},
        ["aio.intra_op_parallelism: expected an integer >= 1, got 0"],
    ),
    "aio-thread-count": (
        {"aio": {"thread_count": 2}},
        ["aio.thread_count: not supported: sharc submits every request of a transfer "
         "to one io_uring queue"],
    ),
    "aio-use-gds": (
        {"aio": {"use_gds": True}},
        ["aio.use_gds: not supported (GPUDirect Storage)"],
    ),
    "aio-single-submit-not-boolean": (
        {"aio": {"single_submit": 1}},
        ["aio.single_submit: expected a boolean (true or false), got 1"],
    ),
    "aio-overlap-events-not-boolean": (
        {"aio": {"overlap_events": "true"}},
        ['aio.overlap_events: expected a boolean (true or false), got "true"'],
    ),
    "zero-offload-device-unknown": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}},
        ['zero_optimization.offload_optimizer.device: expected "none", "cpu" or "nvme"'],
    ),
    "zero-offload-pin-memory-not-boolean": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"pin_memory": "yes"}}},
        ["zero_optimization.offload_optimizer.pin_memory: expected a boolean"],
    ),
    "zero-offload-partial-ratio": (
        {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                 "ratio": 0.5}}},
        ["zero_optimization.offload_optimizer.ratio: offloading part of the "
         "optimizer state (ratio below 1) is not supported yet"],
    ),
    "zero-quantized-gradients": (
        {"zero_optimization": {"zero_quantized_gradients": True}},
        ["zero_optimization.zero_quantized_gradients: not supported yet (ZeRO++)"],
    ),
    "cpu-offload-with-its-replacement": (
        {"zero_optimization": {"stage": 2, "cpu_offload": True,
                               "offload_optimizer": {"device": "cpu"}}},
        ["zero_optimization.cpu_offload: cannot be given with its replacement, "
         "zero_optimization.offload_optimizer"],
    ),
    "top-level-cpu-offload-explained": (
        {"cpu_offload": True},
        ["cpu_offload: a deprecated key of zero_optimization, not of the top level",
         "zero_optimization.offload_optimizer"],
    ),
    "duplicate-key": (
        '{\n  "train_batch_size": 8,\n  "train_batch_size": 16\n}\n',
        ["ds_config.json:3:3: train_batch_size: key given twice"],
    ),
    "invalid-json": (
        '{\n  "train_batch_size": 8,\n}\n',
        ["ds_config.json:3:1: invalid JSON: Expected object key"],
    ),
    "not-an-object": (
        "[1, 2]",
        ["expected a JSON object at the top level, got an array"],
    ),
    "escaped-unknown-key": (
        '{\n  "train\\u0062atch_size": 8\n}\n',
        ["ds_config.json:2:3: trainbatch_size: unknown key; did you mean "
         "'train_batch_size'?"],
    ),
    "infinite-number": (
        '{"optimizer": {"type": "AdamW", "params": {"lr": 1e999}}}',
        ["ds_config.json:1:44: optimizer.params.lr: expected a number >= 0, got 1e999"],
    ),
    "batch-size-overflow": (
        {"gradient_accumulation_steps": 2508546779288553244},
        ["gradient_accumulation_steps 2508546779288553244 * the micro-batch 8 * "
         "world size 1 is more rows per step than a 64-bit integer holds"],
    ),
    # Limits that keep hostile files from exhausting the stack or the memory
    # (kMaxConfigDepth, kMaxConfigArrayElements in Config.h).
    "nested-too-deep": (
        "[" * 50000,
        ["ds_config.json:1:65: JSON nested more than 64 levels deep (the limit "
         "of a DeepSpeed config)"],
    ),
    "array-too-long": (
        {"optimizer": {"type": "AdamW", "params": {"betas": [0.9] * 1001}}},
        ["ds_config.json:5:16: an array of more than 1000 elements (the limit "
         "of a DeepSpeed config)"],
    ),
}


@pytest.mark.parametrize("case", CONFIG_ERRORS)
def test_config_error(sharc, mlp, case):
    config, fragments = CONFIG_ERRORS[case]
    assert_error(train(sharc, mlp, config=config), "ds_config.json", *fragments)


def test_missing_config_file(sharc, mlp):
    path, inputs, directory = mlp
    result = sharc("eval", path, "--train", *inputs, "--config", directory / "absent.json")
    assert_error(result, "cannot read config", "absent.json")


def run_bounded(sharc_args):
    """Runs the sharc CLI under an 8 GiB address-space limit (a guard, should
    the reader ever again grow without bound); returns the CompletedProcess
    and the peak resident memory of sharc in MiB."""
    measure = (
        "import resource, subprocess, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n"
        "result = subprocess.run(sys.argv[1:])\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(f'peak-rss-kib {peak}', file=sys.stderr)\n"
        "sys.exit(result.returncode)\n")
    result = subprocess.run([sys.executable, "-c", measure, str(sharc_path()),
                             *map(str, sharc_args)],
                            capture_output=True, text=True, timeout=120)
    stderr, _, peak = result.stderr.rpartition("peak-rss-kib ")
    result.stderr = stderr
    return result, int(peak) / 1024


def test_config_file_size_is_bounded(mlp, tmp_path):
    """A 25-million-element `betas` array (125 MB; it took 3.6 GB), a 2 MB
    string and an endless device are rejected after reading 1 MiB + 1 byte,
    in bounded memory; the array at its position."""
    path, inputs, _ = mlp
    betas = tmp_path / "betas.json"
    with open(betas, "w") as file:
        file.write('{"optimizer": {"type": "AdamW", "params": {"betas": [0.9')
        chunk = ", 0.9" * 100000
        for _ in range(250):
            file.write(chunk)
        file.write("]}}}\n")
    long_string = tmp_path / "long-string.json"
    long_string.write_text('{"optimizer": {"type": "' + "A" * (2 << 20) + '"}}')
    for config, message in (
            (betas, f"{betas}:1:53: an array of more than 1000 elements"),
            (long_string, f"{long_string}: more than 1048576 bytes"),
            ("/dev/zero", "/dev/zero: more than 1048576 bytes")):
        result, peak = run_bounded(["eval", path, "--train", *inputs, "--config", config])
        assert_error(result, message + " (the limit of a DeepSpeed config)")
        assert peak < 1024, f"{peak:.0f} MiB"


def test_long_keys_above_many_values(mlp, tmp_path):
    """Where each value is in the file is found by scanning again, not kept
    per value: a 400 kB key above 250,000 values is an unknown key, found
    quickly and in little memory (keeping each value's path took 100 GB)."""
    path, inputs, _ = mlp
    config = tmp_path / "long-key.json"
    key = "k" * 400000
    rows = "[" + ",".join(["[" + ",".join(["0"] * 500) + "]"] * 500) + "]"
    config.write_text('{"optimizer": {"type": "AdamW", "params": {"' + key + '": ' +
                      rows + "}}}")
    result, peak = run_bounded(["eval", path, "--train", *inputs, "--config", config])
    assert_error(result, "long-key.json:1:44: optimizer.params.kkkk", ": unknown key")
    assert peak < 1024, f"{peak:.0f} MiB"


def test_features_left_off_are_accepted(sharc, mlp):
    """Keys of features sharc lacks are fine when their value keeps the
    feature off, as DeepSpeed's defaults do."""
    config = {
        "fp16": {"enabled": False, "loss_scale": 0},
        "bf16": {"enabled": False},
        "zero_optimization": {"stage": 0},
        "wall_clock_breakdown": False,
        "prescale_gradients": False,
        "gradient_predivide_factor": 1.0,
        "communication_data_type": None,
        "tensorboard": {"output_path": "runs"},
    }
    result = train(sharc, mlp, config=config)
    assert result.returncode == 0, result.stderr
    # (A config clips at 1.0 unless it says otherwise, as DeepSpeed 0.19.8.)
    assert result.stdout == train(sharc, mlp, "--clip", "1").stdout


def test_bf16_config_equals_the_flag(sharc, mlp):
    """bf16.enabled trains as --precision bf16 does (with check_grad_overflow
    on, DeepSpeed's default, or off as --check-grad-overflow=false), and not
    as fp32 does; the old name bfloat16 too."""
    for check, flags in ((True, []), (False, ["--check-grad-overflow=false"])):
        from_flag = train(sharc, mlp, "--precision", "bf16", "--clip", "1",
                          *flags)
        assert from_flag.returncode == 0, from_flag.stderr
        for key in ("bf16", "bfloat16"):
            from_config = train(sharc, mlp, config={
                key: {"enabled": True, "check_grad_overflow": check}})
            assert from_config.returncode == 0, from_config.stderr
            assert from_config.stdout == from_flag.stdout
        assert from_flag.stdout != train(sharc, mlp, "--clip", "1").stdout
    assert_error(train(sharc, mlp, "--precision", "int8"),
                 "--precision 'int8': expected fp32, fp16 or bf16")


def test_fp16_config_equals_the_flags(sharc, mlp):
    """The fp16 block's keys and the scaler's flags mean the same: each
    setting changes the run (the scale line), and a config and its flags
    print the same lines."""
    settings = {"initial_scale_power": 20, "loss_scale_window": 2,
                "hysteresis": 1, "consecutive_hysteresis": True,
                "min_loss_scale": 2}
    flags = ["--initial-scale-power", "20", "--loss-scale-window", "2",
             "--hysteresis", "1", "--consecutive-hysteresis",
             "--min-loss-scale", "2"]
    from_config = train(sharc, mlp, config={
        "fp16": dict(settings, enabled=True)})
    assert from_config.returncode == 0, from_config.stderr
    from_flags = train(sharc, mlp, "--precision", "fp16", "--clip", "1",
                       *flags)
    assert from_flags.returncode == 0, from_flags.stderr
    assert from_config.stdout == from_flags.stdout
    assert " scale 1048576" in from_config.stdout, from_config.stdout
    # Defaults: 2^16.
    default = train(sharc, mlp, "--precision", "fp16")
    assert default.returncode == 0, default.stderr
    assert default.stdout.splitlines()[0].endswith(" scale 65536"), default.stdout
    # A static scale.
    static = train(sharc, mlp, config={"fp16": {"enabled": True,
                                                "loss_scale": 100}})
    assert static.returncode == 0, static.stderr
    assert static.stdout == train(sharc, mlp, "--precision", "fp16",
                                  "--loss-scale", "100", "--clip", "1").stdout
    assert all(line.endswith(" scale 100")
               for line in static.stdout.splitlines()), static.stdout


def test_precision_flags_that_do_not_apply(sharc, mlp):
    """The scaler's flags belong to fp16 (the dynamic ones to dynamic
    scaling), --check-grad-overflow to bf16: elsewhere they are errors."""
    assert_error(train(sharc, mlp, "--hysteresis", "1"),
                 "--hysteresis does not apply to --precision fp32")
    assert_error(train(sharc, mlp, "--precision", "bf16", "--loss-scale", "8"),
                 "--loss-scale does not apply to --precision bf16")
    assert_error(train(sharc, mlp, "--precision", "fp16", "--loss-scale", "8",
                       "--loss-scale-window", "4"),
                 "--loss-scale-window does not apply to a static loss scale")
    assert_error(train(sharc, mlp, "--precision", "fp16",
                       "--check-grad-overflow"),
                 "--check-grad-overflow does not apply to --precision fp16")
    assert_error(train(sharc, mlp, "--precision", "fp16",
                       "--initial-scale-power", "65"),
                 "--initial-scale-power must be in [0, 64], got 65")


def test_precision_blocks_left_off_are_accepted(sharc, mlp):
    """Every key of DeepSpeed's fp16 and bf16 blocks, with the features off."""
    config = {
        "fp16": {"enabled": False, "auto_cast": False, "loss_scale": 0,
                 "initial_scale_power": 12, "loss_scale_window": 500,
                 "hysteresis": 2, "consecutive_hysteresis": True,
                 "min_loss_scale": 1, "fp16_master_weights_and_grads": False},
        "bf16": {"enabled": False, "immediate_grad_update": False,
                 "check_grad_overflow": True,
                 "bf16_master_weights_and_grads": False,
                 "bf16_optimizer_states": False},
    }
    result = train(sharc, mlp, config=config)
    assert result.returncode == 0, result.stderr
    assert result.stdout == train(sharc, mlp, "--clip", "1").stdout


@pytest.mark.parametrize("block", ["fp16", "bf16"])
def test_precision_keys_are_deepspeeds(sharc, mlp, block):
    """The keys sharc knows in the fp16 and bf16 blocks are exactly those of
    DeepSpeed 0.19.8's config models (read from DeepSpeed itself): the
    unknown-key message lists them."""
    import os
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    precision = pytest.importorskip(
        "deepspeed.runtime.precision_config",
        reason="DeepSpeed is not installed (tools/install-deps.sh --test installs it)")
    model = {"fp16": precision.DeepSpeedFP16Config,
             "bf16": precision.DeepSpeedBF16Config}[block]
    result = train(sharc, mlp, config={block: {"no_such_key": 1}})
    assert_error(result, f"{block}.no_such_key: unknown key")
    listed = re.search(r"known keys: ([^)]*)\)", result.stderr)
    assert listed, result.stderr
    assert set(listed.group(1).split(", ")) == set(model.model_fields)


def test_zero_keys_are_deepspeeds(sharc, mlp):
    """Every key of DeepSpeed 0.19.8's DeepSpeedZeroConfig (read from DeepSpeed
    itself), at DeepSpeed's default, and the stage-3 aliases, are accepted at
    stage 0; the deprecated offload keys are explained instead."""
    import os
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    zero = pytest.importorskip(
        "deepspeed.runtime.zero.config",
        reason="DeepSpeed is not installed (tools/install-deps.sh --test installs it)")
    defaults = json.loads(json.dumps(zero.DeepSpeedZeroConfig().model_dump(),
                                     default=str))
    deprecated = {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory"}
    aliases = {field.alias: defaults[name]
               for name, field in zero.DeepSpeedZeroConfig.model_fields.items()
               if field.alias}
    config = {key: value for key, value in defaults.items()
              if key not in deprecated}
    assert len(config) > 30 and len(aliases) > 5
    for block in (config, aliases):
        result = train(sharc, mlp, config={"zero_optimization": block}, steps=1)
        assert result.returncode == 0, result.stderr
    # DeepSpeed 0.19.8 maps the deprecated offload keys with a warning, and
    # so does sharc (stage 3, where parameters may be offloaded too).
    for key in deprecated:
        result = train(sharc, mlp, config={"zero_optimization": {"stage": 3,
                                                                 key: True}})
        assert result.returncode == 0, result.stderr
        assert f"sharc: warning: " in result.stderr, result.stderr
        assert f"zero_optimization.{key}: deprecated; DeepSpeed 0.19.8 reads it as" \
            in result.stderr, result.stderr


def test_offload_to_the_cpu_changes_nothing_on_the_cpu_target(sharc, mlp, tmp_path):
    """offload_optimizer (and its deprecated cpu_offload) on the CPU target:
    accepted, said so in the report, and the same losses as without it, on
    the evaluator and the binary (the host memory is the device's)."""
    path, inputs, _ = mlp
    config = tmp_path / "ds_config.json"
    losses = {}
    for name, zero in [("none", {"stage": 2}),
                       ("cpu", {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                  "pin_memory": True}})]:
        config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8,
                                      "optimizer": {"type": "AdamW",
                                                    "params": {"lr": 0.01}},
                                      "zero_optimization": zero}))
        evaluator = sharc("eval", path, "--train", "--steps", 3, *inputs,
                          "--config", config)
        assert evaluator.returncode == 0, evaluator.stderr
        out = tmp_path / name
        result = sharc("compile", path, "--config", config, "-o", out, "--report")
        assert result.returncode == 0, result.stderr
        assert ("report: ZeRO-Offload to the CPU" in result.stdout) == (name == "cpu")
        run = subprocess.run([str(out / "train"), *map(str, inputs), "--steps", "3"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        lines = lambda text: re.findall(r"^step \d+ loss \S+", text, re.MULTILINE)
        assert lines(run.stdout) == lines(evaluator.stdout)
        losses[name] = lines(run.stdout)
    assert losses["cpu"] == losses["none"]
    # The flags mirror the keys.
    flagged = sharc("eval", path, "--train", "--steps", 3, *inputs, "--zero-stage", 2,
                    "--offload-optimizer", "cpu", "--optimizer", "adamw", "--lr", "0.01")
    assert flagged.returncode == 0, flagged.stderr
    assert lines(flagged.stdout) == losses["none"]
    for flags, message in [
            (["--offload-optimizer", "cpu"], "offload_optimizer (--offload-optimizer) "
                                              "needs ZeRO stage 1, 2 or 3"),
            (["--offload-param", "cpu", "--zero-stage", 2],
             "offload_param (--offload-param) needs ZeRO stage 3"),
            (["--offload-optimizer", "gpu", "--zero-stage", 1],
             "--offload-optimizer 'gpu': expected none, cpu or nvme")]:
        assert_error(sharc("eval", path, "--train", *inputs, *flags), message)
    # On the CUDA target the state goes to host memory and its update runs
    # on the host, and at stage 3 the parameters can stay there too
    # (test_offload.py, test_cuda_compile.py).
    result = sharc("compile", path, "--config", config, "--target", "cuda",
                   "--emit-only", "-o", tmp_path / "cuda")
    assert result.returncode == 0, result.stderr
    assert "sharc::kern::launchHost(" in (tmp_path / "cuda" / "program.cu").read_text()
    result = sharc("compile", path, "--target", "cuda", "--emit-only", "--world-size", 2,
                   "--zero-stage", 3, "--param-persistence-threshold", 0,
                   "--offload-param", "cpu", "-o", tmp_path / "cuda3", "--report")
    assert result.returncode == 0, result.stderr
    assert "report: ZeRO-Offload of the parameters (stage 3)" in result.stdout


def test_nvme_offload_is_accepted(sharc, mlp, tmp_path):
    """Optimizer state offloaded to NVMe, from the config (with every key of
    DeepSpeed's offload_optimizer block and an aio block) or from the flags:
    accepted at stages 1 to 3.  (What it does to the step is the compiler's;
    here only that the settings are read.)"""
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    config = {"train_micro_batch_size_per_gpu": 8,
              "zero_optimization": {
                  "stage": 1, "sub_group_size": 1000,
                  "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme),
                                        "pipeline_read": False, "pipeline_write": True,
                                        "buffer_count": 5, "pin_memory": True,
                                        "fast_init": False}},
              "aio": {"block_size": 262144, "queue_depth": 16, "intra_op_parallelism": 1,
                      "single_submit": True, "overlap_events": False, "use_gds": False}}
    result = train(sharc, mlp, config=config, steps=1)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    # A null aio block is DeepSpeed's defaults; the aio block needs no NVMe.
    result = train(sharc, mlp, config={"aio": None}, steps=1)
    assert result.returncode == 0, result.stderr
    result = train(sharc, mlp, config={"aio": {"queue_depth": 4}}, steps=1)
    assert result.returncode == 0, result.stderr
    # sub_group_size at every stage, as in DeepSpeed.
    for stage in range(4):
        result = train(sharc, mlp, config={"zero_optimization": {
            "stage": stage, "sub_group_size": 1}}, steps=1)
        assert result.returncode == 0, result.stderr
    # The flags.
    result = train(sharc, mlp, "--zero-stage", 2, "--offload-optimizer", "nvme",
                   "--nvme-path", nvme, "--sub-group-size", 100, "--pipeline-read=false",
                   "--pipeline-write", steps=1)
    assert result.returncode == 0, result.stderr


def test_thread_count_is_a_deprecated_alias(sharc, mlp, tmp_path):
    """aio.thread_count, intra_op_parallelism's old name: read as it, with a
    warning that says DeepSpeed 0.19.8 ignores it (by `sharc config` and
    `sharc eval --train` alike); values other than 1 are refused as
    intra_op_parallelism's."""
    warning = ("sharc: warning: {0}:3:5: aio.thread_count: deprecated: DeepSpeed 0.19.8 "
               "ignores it silently (its name is now intra_op_parallelism); sharc reads "
               "it as aio.intra_op_parallelism")
    result = train(sharc, mlp, config={"aio": {"thread_count": 1}}, steps=1)
    assert result.returncode == 0, result.stderr
    assert warning.format(mlp[2] / "ds_config.json") in result.stderr, result.stderr
    path = tmp_path / "ds_config.json"
    path.write_text('{\n  "aio": {\n    "thread_count": 1\n  },\n  "train_batch_size": 8\n}\n')
    result = sharc("config", path)
    assert result.returncode == 0, result.stderr
    assert warning.format(path) in result.stderr, result.stderr
    assert json.loads(result.stdout)["aio"]["intra_op_parallelism"] == 1


def test_nvme_offload_flags(sharc, mlp, tmp_path):
    """--offload-optimizer nvme, --nvme-path, --sub-group-size and
    --pipeline-read/-write on `sharc eval --train` and `sharc compile`:
    each checked, each overriding the config; --offload-param nvme needs
    a folder and stage 3.  (Whether a flag was taken shows in the error that follows it:
    nvme at stage 0 reaches the stage check.)"""
    path, inputs, _ = mlp
    nvme = str(tmp_path)
    config = tmp_path / "ds_config.json"

    def both(*flags):
        """The results of `eval --train` and `compile --plan` with `flags`."""
        return [sharc("eval", path, "--train", *inputs, *flags),
                sharc("compile", path, "--plan", *flags)]

    cases = [
        (["--offload-param", "nvme", "--zero-stage", 3],
         "--offload-param nvme needs --nvme-path DIR (or the nvme_path of "
         "zero_optimization's offload block in the config)"),
        (["--offload-param", "nvme", "--nvme-path", nvme, "--zero-stage", 2],
         "zero_optimization.offload_param (--offload-param) needs ZeRO stage 3"),
        (["--offload-param", "disk", "--zero-stage", 3],
         "--offload-param 'disk': expected none, cpu or nvme"),
        (["--nvme-path", nvme, "--zero-stage", 1],
         "--nvme-path needs --offload-optimizer nvme or --offload-param nvme"),
        (["--nvme-path", nvme, "--offload-optimizer", "cpu", "--zero-stage", 1],
         "--nvme-path needs --offload-optimizer nvme or --offload-param nvme"),
        (["--nvme-path", "", "--offload-optimizer", "nvme", "--zero-stage", 1],
         "--nvme-path expects a folder, got an empty string"),
        (["--offload-optimizer", "nvme", "--zero-stage", 1],
         "--offload-optimizer nvme needs --nvme-path DIR (or the nvme_path of "
         "zero_optimization's offload block in the config)"),
        (["--offload-optimizer", "nvme", "--nvme-path", nvme],
         "zero_optimization.offload_optimizer (--offload-optimizer) needs ZeRO stage 1, "
         "2 or 3"),
        (["--sub-group-size", 0], "--sub-group-size must be in [1, 1099511627776], got 0"),
        (["--sub-group-size", 2 ** 41],
         "--sub-group-size must be in [1, 1099511627776], got 2199023255552"),
    ]
    for flags, message in cases:
        for result in both(*flags):
            assert_error(result, message)

    # The config offloads to NVMe without a folder: --nvme-path gives it (the
    # run then stops at the stage check); without it the key is named, by
    # `sharc compile --plan` too.
    config.write_text(json.dumps({"zero_optimization": {
        "stage": 0, "offload_optimizer": {"device": "nvme"}}}))
    for result in both("--config", config, "--nvme-path", nvme):
        assert_error(result, "offload_optimizer (--offload-optimizer) needs ZeRO stage")
    for result in both("--config", config):
        assert_error(result, f"{config}:1:36: zero_optimization.offload_optimizer."
                     'nvme_path: required with device "nvme"')
    # The flags override the config's device and folder.
    config.write_text(json.dumps({"zero_optimization": {
        "stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": nvme}}}))
    for result in both("--config", config, "--offload-optimizer", "cpu", "--nvme-path",
                       nvme):
        assert_error(result, "--nvme-path needs --offload-optimizer nvme or "
                     "--offload-param nvme")
    for result in both("--config", config, "--offload-optimizer", "nvme", "--nvme-path",
                       nvme, "--zero-stage", 0):
        assert_error(result, "needs ZeRO stage 1, 2 or 3")
    # Training flags need --train.
    for flag in (["--nvme-path", nvme], ["--sub-group-size", 5], ["--pipeline-read"],
                 ["--pipeline-write=false"]):
        assert_error(sharc("eval", path, *inputs, *flag),
                     f"{flag[0].split('=')[0]} applies to training only; add --train")


def test_aio_keys_are_deepspeeds(sharc, mlp):
    """The keys sharc lists for the aio block are exactly DeepSpeed 0.19.8's
    (read from DeepSpeed itself)."""
    import os
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    aio = pytest.importorskip(
        "deepspeed.runtime.swap_tensor.aio_config",
        reason="DeepSpeed is not installed (tools/install-deps.sh --test installs it)")
    result = train(sharc, mlp, config={"aio": {"no_such_key": 1}})
    assert_error(result, "aio.no_such_key: unknown key")
    listed = re.search(r"known keys: ([^)]*)\)", result.stderr)
    assert listed, result.stderr
    assert set(listed.group(1).split(", ")) == set(aio.AIO_DEFAULT_DICT)
    # Every key at DeepSpeed's default is accepted.
    result = train(sharc, mlp, config={"aio": dict(aio.AIO_DEFAULT_DICT)}, steps=1)
    assert result.returncode == 0, result.stderr


EQUIVALENT = {
    "adamw-warmup-clip": (
        {
            "train_batch_size": 16,
            "gradient_clipping": 0.5,
            "optimizer": {"type": "AdamW", "params": {
                "lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6,
                "weight_decay": 0.05}},
            "scheduler": {"type": "WarmupLR", "params": {
                "warmup_min_lr": 0.001, "warmup_max_lr": 0.02,
                "warmup_num_steps": 3, "warmup_type": "linear"}},
        },
        ["--optimizer", "adamw", "--lr", "0.01", "--betas", "0.8,0.99",
         "--eps", "1e-6", "--weight-decay", "0.05", "--grad-accum", "2",
         "--clip", "0.5", "--scheduler", "WarmupLR", "--warmup-min-lr", "0.001",
         "--warmup-max-lr", "0.02", "--warmup-num-steps", "3",
         "--warmup-type", "linear"],
    ),
    "adam-l2": (
        {"optimizer": {"type": "adam", "params": {
            "lr": 0.003, "weight_decay": 0.1, "adam_w_mode": False,
            "bias_correction": False}}},
        # A config without gradient_clipping clips at 1.0 (DeepSpeed 0.19.8).
        ["--optimizer", "adam", "--lr", "0.003", "--weight-decay", "0.1",
         "--adam-w-mode=false", "--bias-correction=false", "--clip", "1"],
    ),
    "sgd-nesterov-decay": (
        {
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 2,
            "optimizer": {"type": "SGD", "params": {
                "lr": 0.05, "momentum": 0.9, "nesterov": True}},
            "scheduler": {"type": "WarmupDecayLR", "params": {
                "warmup_max_lr": 0.05, "warmup_num_steps": 2,
                "total_num_steps": 4}},
        },
        ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
         "--nesterov", "--grad-accum", "2", "--scheduler", "WarmupDecayLR",
         "--warmup-max-lr", "0.05", "--warmup-num-steps", "2",
         "--total-num-steps", "4", "--clip", "1"],
    ),
}


@pytest.mark.parametrize("case", EQUIVALENT)
def test_config_equals_flags(sharc, mlp, case):
    config, flags = EQUIVALENT[case]
    from_config = train(sharc, mlp, config=config, steps=4)
    from_flags = train(sharc, mlp, *flags, steps=4)
    assert from_config.returncode == 0, from_config.stderr
    assert from_flags.returncode == 0, from_flags.stderr
    assert from_config.stdout.count("\n") == 4, from_config.stdout
    assert from_config.stdout == from_flags.stdout
    # Not the defaults: the settings make a difference.
    assert from_config.stdout != train(sharc, mlp, steps=4).stdout


def test_flags_override_config(sharc, mlp):
    config = {"optimizer": {"type": "SGD", "params": {"lr": 0.5, "momentum": 0.9}}}
    overridden = train(sharc, mlp, "--lr", "0.01", config=config)
    assert overridden.returncode == 0, overridden.stderr
    assert overridden.stdout == train(
        sharc, mlp, "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9").stdout
    assert "lr 0.01\n" in overridden.stdout


def test_activation_checkpointing_block_recomputes_layers(sharc, mlp):
    """The block turns on --recompute layers (the MLP has no repeated
    layers: the pass's warning, the same step lines); --recompute none
    overrides it."""
    config = {"activation_checkpointing": {"contiguous_memory_optimization": True,
                                           "number_checkpoints": 3}}
    checkpointed = train(sharc, mlp, config=config)
    assert checkpointed.returncode == 0, checkpointed.stderr
    assert "sharc-rematerialize: no repeated layers found" in checkpointed.stderr
    assert checkpointed.stdout == train(sharc, mlp).stdout
    overridden = train(sharc, mlp, "--recompute", "none", config=config)
    assert overridden.returncode == 0, overridden.stderr
    assert "sharc-rematerialize" not in overridden.stderr


def test_checkpoints_in_host_memory(sharc, mlp, tmp_path):
    """cpu_checkpointing: the CPU target keeps the checkpoints in host memory
    already (the report says nothing moves, the step lines are those
    without it); the CUDA target's program moves them (test_recompute.py
    runs it on the CPU with --host-update).  partition_activations changes
    nothing without a tensor-parallel group, as in DeepSpeed."""
    path, inputs, directory = mlp
    config = {"activation_checkpointing": {"cpu_checkpointing": True,
                                           "partition_activations": True}}
    config_path = tmp_path / "ds_config.json"
    config_path.write_text(json.dumps(config))
    assert train(sharc, mlp, config=config).stdout == train(sharc, mlp).stdout
    cpu = sharc("compile", path, "--config", config_path, "--emit-only",
                "--report", "-o", tmp_path / "cpu")
    assert cpu.returncode == 0, cpu.stderr
    assert "cpu_checkpointing: on the CPU target the checkpoints are in host " \
        "memory already; nothing moves" in cpu.stdout


def test_grad_accum_flag_is_checked_against_the_config(sharc, mlp):
    config = {"train_batch_size": 16}
    assert_error(train(sharc, mlp, "--grad-accum", "3", config=config),
                 "train_batch_size 16", "gradient_accumulation_steps 3")


def test_dump_grads_needs_one_rank(sharc, mlp, tmp_path):
    """The evaluator simulates --world-size N ranks, but --dump-grads writes
    one rank's gradients: with N > 1 it is an error, and nothing is
    written."""
    grads = tmp_path / "grads"
    assert_error(train(sharc, mlp, "--world-size", "2", "--dump-grads", grads),
                 "--dump-grads needs one rank (--world-size 1)")
    assert not grads.exists()
    assert train(sharc, mlp, "--world-size", "2").returncode == 0


# The seed's ds_config.json (issue 13): fp16 with dynamic loss scaling, ZeRO
# stage 2 with the deprecated cpu_offload and a misspelt offload_params block,
# AdamW and WarmupLR.
SEED_CONFIG = {
    "train_batch_size": 128,
    "gradient_accumulation_steps": 2,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
    "zero_optimization": {"stage": 2, "cpu_offload": True,
                          "offload_params": {"device": "cpu", "pin_memory": True}},
    "zero_allow_untested_optimizer": True,
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999],
                                              "eps": 1e-8}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0,
                                                 "warmup_max_lr": 2e-5,
                                                 "warmup_num_steps": 1000}},
}


def test_the_seeds_config(sharc, tmp_path):
    """The seed's ds_config.json (fp16 with dynamic loss scaling, ZeRO stage
    2 with the deprecated cpu_offload and a misspelt offload_params block,
    zero_allow_untested_optimizer, AdamW and WarmupLR), at the bundled GPT's
    batch: the misspelt block is refused with the guess; without it the
    deprecated key is mapped with a warning, and the CPU binaries train on
    2 ranks printing the evaluator's step lines."""
    bundled = pathlib.Path(__file__).resolve().parents[1] / "models"
    model = bundled / "tiny-gpt.onnx"
    data = ["--input", f"tokens={bundled / 'tiny-gpt-tokens.npy'}",
            "--input", f"targets={bundled / 'tiny-gpt-targets.npy'}"]
    seed = copy.deepcopy(SEED_CONFIG)
    seed["train_batch_size"] = 8  # the bundled GPT's micro-batch 2, 2 ranks, GAS 2
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(seed, indent=2))
    result = sharc("compile", model, "--config", config, "--world-size", 2,
                   "-o", tmp_path / "out")
    assert_error(result, "zero_optimization.offload_params: unknown key; did you "
                 "mean 'offload_param'?")
    del seed["zero_optimization"]["offload_params"]
    config.write_text(json.dumps(seed, indent=2))
    result = sharc("compile", model, "--config", config, "--world-size", 2,
                   "-o", tmp_path / "out", "--report")
    assert result.returncode == 0, result.stderr
    assert "zero_optimization.cpu_offload: deprecated" in result.stderr
    assert "report: ZeRO-Offload to the CPU (optimizer state)" in result.stdout
    run = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                          str(tmp_path / "out" / "train"), *data, "--steps", "4"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    evaluator = sharc("eval", model, "--train", "--config", config, "--world-size", 2,
                      "--steps", 4, *data)
    assert evaluator.returncode == 0, evaluator.stderr
    lines = lambda text: re.findall(r"^step .* scale \S+", text, re.MULTILINE)
    assert len(lines(run.stdout)) == 4
    assert [l.split(" ms ")[0] for l in lines(run.stdout)] == lines(evaluator.stdout)


RESOLVE_CASES = {
    # Activation checkpointing with every key DeepSpeed's block has.
    "activation-checkpointing": ({"train_micro_batch_size_per_gpu": 2,
                                  "activation_checkpointing": {
                                      "partition_activations": True,
                                      "contiguous_memory_optimization": True,
                                      "cpu_checkpointing": True,
                                      "number_checkpoints": 12,
                                      "synchronize_checkpoint_boundary": False,
                                      "profile": False}},
                                 [1, 2]),
    # Without its misspelt block (which both refuse).
    "the-seeds": ({**SEED_CONFIG, "zero_optimization": {"stage": 2, "cpu_offload": True}},
                  [8, 16]),
    "micro-only": ({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.5,
                    "bf16": {"enabled": True},
                    "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}},
                   [1, 3]),
    "train-and-micro": ({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 3,
                         "fp16": {"enabled": True, "loss_scale_window": 50,
                                  "hysteresis": 1, "min_loss_scale": 2},
                         "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                               "stage3_prefetch_bucket_size": 1000},
                         "scheduler": {"type": "OneCycle", "params": {
                             "cycle_min_lr": 0.01, "cycle_max_lr": 0.1}}},
                        [2, 4]),
    # NVMe offload of the optimizer state with every key of DeepSpeed's block,
    # sub-groups and an aio block.
    "nvme-offload-and-aio": ({"train_micro_batch_size_per_gpu": 2,
                              "zero_optimization": {
                                  "stage": 3, "sub_group_size": 100000,
                                  "offload_optimizer": {
                                      "device": "nvme", "nvme_path": "/local_nvme/sharc",
                                      "pipeline_read": True, "pipeline_write": False,
                                      "buffer_count": 5, "pin_memory": False,
                                      "fast_init": True}},
                              "aio": {"block_size": 262144, "queue_depth": 16,
                                      "intra_op_parallelism": 1, "single_submit": True,
                                      "overlap_events": False, "use_gds": False}},
                             [1, 2]),
    # The pipelining keys absent (sharc's default, on, differs from
    # DeepSpeed's), the old thread_count (which DeepSpeed ignores) and a
    # partial aio block; stage 1.
    "nvme-offload-defaults": ({"train_batch_size": 16,
                               "zero_optimization": {
                                   "stage": 1,
                                   "offload_optimizer": {"device": "nvme",
                                                         "nvme_path": "nvme"}},
                               "aio": {"queue_depth": 32, "thread_count": 1}},
                              [1, 4]),
    # Parameters and optimizer state on NVMe, in one folder; and parameters
    # alone.
    "nvme-offload-parameters": ({"train_micro_batch_size_per_gpu": 2,
                                 "zero_optimization": {
                                     "stage": 3,
                                     "offload_optimizer": {"device": "nvme",
                                                           "nvme_path": "/nvme"},
                                     "offload_param": {"device": "nvme",
                                                       "nvme_path": "/nvme",
                                                       "buffer_count": 4}}},
                                [2]),
    "nvme-offload-parameters-alone": ({"train_micro_batch_size_per_gpu": 2,
                                       "zero_optimization": {
                                           "stage": 3,
                                           "offload_param": {"device": "nvme",
                                                             "nvme_path": "/nvme"}}},
                                      [1]),
    # The aio block without offload, null.
    "aio-null": ({"train_micro_batch_size_per_gpu": 1, "aio": None}, [1]),
    # The CSV monitor, with and without its path and job name.
    "csv-monitor": ({"train_micro_batch_size_per_gpu": 1,
                     "csv_monitor": {"enabled": True, "output_path": "logs",
                                     "job_name": "run1"}}, [1]),
    "csv-monitor-defaults": ({"train_micro_batch_size_per_gpu": 1,
                              "csv_monitor": {"enabled": True}}, [1]),
}


@pytest.mark.parametrize("case", RESOLVE_CASES)
def test_config_command_resolves_as_deepspeed(sharc, tmp_path, case, monkeypatch):
    """`sharc config FILE --world-size N` against DeepSpeed 0.19.8's own
    DeepSpeedConfig of the same file at the same world size (the oracle, on
    the CPU): the derived batch sizes, clipping, precision and loss-scaler
    settings, optimizer, schedule, ZeRO stage and offload devices agree;
    a world size the batch does not divide fails on both sides."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    config_module = pytest.importorskip(
        "deepspeed.runtime.config",
        reason="DeepSpeed is not installed (tools/install-deps.sh --test installs it)")
    import deepspeed.comm as dist
    config, world_sizes = RESOLVE_CASES[case]
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    for world in world_sizes:
        monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)
        monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)
        ours = sharc("config", path, "--world-size", world)
        assert ours.returncode == 0, ours.stderr
        mine = json.loads(ours.stdout)
        theirs = config_module.DeepSpeedConfig(json.loads(path.read_text()))
        assert mine["world_size"] == world
        assert (mine["train_batch_size"], mine["train_micro_batch_size_per_gpu"],
                mine["gradient_accumulation_steps"]) == (
            theirs.train_batch_size, theirs.train_micro_batch_size_per_gpu,
            theirs.gradient_accumulation_steps)
        assert mine["gradient_clipping"] == theirs.gradient_clipping
        fp16 = theirs.float16_config
        assert mine["fp16"]["enabled"] == fp16.enabled
        for key in ("loss_scale", "initial_scale_power", "loss_scale_window",
                    "hysteresis", "consecutive_hysteresis", "min_loss_scale"):
            assert mine["fp16"][key] == getattr(fp16, key), key
        assert mine["bf16"]["enabled"] == theirs.bfloat16_config.enabled
        assert mine["optimizer"]["type"].lower() == (theirs.optimizer_name or "adamw").lower()
        for key, value in (theirs.optimizer_params or {}).items():
            expected = list(value) if isinstance(value, (list, tuple)) else value
            assert mine["optimizer"]["params"][key] == expected, key
        if theirs.scheduler_name:
            assert mine["scheduler"]["type"] == theirs.scheduler_name
            for key, value in theirs.scheduler_params.items():
                assert mine["scheduler"]["params"][key] == value, key
        else:
            assert mine["scheduler"] is None
        zero = theirs.zero_config
        assert mine["zero_optimization"]["stage"] == theirs.zero_optimization_stage
        for block in ("offload_optimizer", "offload_param"):
            offload = getattr(zero, block)
            device = str(getattr(offload.device, "value", offload.device)) \
                if offload else "none"
            assert mine["zero_optimization"][block]["device"] == device, block
        # NVMe offload: the folder, the pipelining (on in sharc unless the
        # config turns it off, where DeepSpeed's default is off: docs/config.md),
        # sub-groups and the aio block, as DeepSpeed resolves them.
        for block in ("offload_optimizer", "offload_param"):
            offload = getattr(zero, block)
            assert mine["zero_optimization"][block]["nvme_path"] == (
                str(offload.nvme_path) if offload and offload.nvme_path is not None
                else None), block
        ours_offload = mine["zero_optimization"]["offload_optimizer"]
        offload = zero.offload_optimizer
        given = (config.get("zero_optimization") or {}).get("offload_optimizer") or {}
        for key in ("pipeline_read", "pipeline_write"):
            if key in given:
                assert ours_offload[key] == getattr(offload, key), key
            else:
                assert ours_offload[key] is True, key
                assert not offload or getattr(offload, key) is False, key
        assert mine["zero_optimization"]["sub_group_size"] == zero.sub_group_size
        assert mine["aio"] == theirs.aio_config
        if theirs.zero_optimization_stage == 3:
            assert mine["zero_optimization"]["stage3_prefetch_bucket_size"] == \
                zero.prefetch_bucket_size
            assert mine["zero_optimization"]["stage3_max_live_parameters"] == \
                zero.max_live_parameters
        # Activation checkpointing: DeepSpeed's keys as it resolves them
        # (its defaults without the block); the block turns on sharc's
        # --recompute layers.
        checkpointing = theirs.activation_checkpointing_config
        for key in ("partition_activations", "contiguous_memory_optimization",
                    "cpu_checkpointing", "number_checkpoints",
                    "synchronize_checkpoint_boundary", "profile"):
            assert mine["activation_checkpointing"][key] == \
                getattr(checkpointing, key), key
        assert mine["recompute"] == (
            "layers" if "activation_checkpointing" in config else "none")
        # The CSV monitor as DeepSpeed's monitor config resolves it.
        csv = theirs.monitor_config.csv_monitor
        assert mine["csv_monitor"] == {"enabled": csv.enabled,
                                       "output_path": csv.output_path,
                                       "job_name": csv.job_name}
    # 7 ranks divide none of these global batches: both refuse.
    if "train_batch_size" in config:
        result = sharc("config", path, "--world-size", 7)
        assert result.returncode == 1 and "sharc: error: " in result.stderr
        assert "inconsistent batch sizes" in result.stderr, result.stderr
        monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 7)
        with pytest.raises(AssertionError):
            config_module.DeepSpeedConfig(json.loads(path.read_text()))
