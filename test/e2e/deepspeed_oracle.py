"""DeepSpeed itself as a test oracle: trains one of the models of models.py
with a DeepSpeed config, on the CPU, over N gloo ranks on the loopback
interface, and returns the loss of every step as DeepSpeed's engine computes
it (docs/semantics.md, "DeepSpeed as a test oracle").

Rank r of step k trains on the rows sharc's data loader gives it
(docs/runtime.md, "Sharding rule"): the global batch of micro x GAS x N rows
starting at row k x micro x GAS x N, wrapping, rank r's contiguous block of
it, micro-batch g the g-th `micro` rows of that block.  A step's loss is the
mean over the rank's micro-batches, averaged over the ranks, as sharc's
binaries print it.

    losses = deepspeed_oracle.train("mlp", config, data, steps=10, ranks=2)
    steps = deepspeed_oracle.train_steps(...)  # losses, scales, skips
"""

import faulthandler
import json
import os
import pathlib
import socket
import sys
import tempfile

import torch
import torch.multiprocessing as mp

HERE = pathlib.Path(__file__).resolve().parent


def available():
    """Why DeepSpeed cannot run here, or None when it can."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed  # noqa: F401
    except Exception as error:  # ImportError or a broken installation.
        return f"DeepSpeed cannot be imported: {error}"
    return None


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _shared_memory(port):
    """The shared-memory files DeepSpeed's CPU all-reduce (its
    deepspeed_shm_comm op) creates for a run whose MASTER_PORT is `port`:
    /dev/shm/deepspeed_allreduce_buffer_<i>_127.0.0.1_<port>_<rank>, 66 MiB
    each, which DeepSpeed never removes."""
    shm = pathlib.Path("/dev/shm")
    if not shm.is_dir():
        return []
    return [path for path in shm.glob(f"deepspeed_*_127.0.0.1_{port}_*")
            if path.is_file() and not path.is_symlink()]


def _remove_shared_memory(port):
    """Removes the run's shared-memory files (they hold RAM until removed:
    hundreds of runs filled a 24 GiB machine)."""
    for path in _shared_memory(port):
        path.unlink(missing_ok=True)


def _rank_rows(step, rank, ranks, micro, gas, total):
    """The file rows of rank `rank`'s block of global step `step`."""
    block = micro * gas
    start = step * block * ranks + rank * block
    return (torch.arange(block) + start) % total


def _worker(rank, ranks, port, name, config, data, steps, result_path):
    # A worker that dies on a signal shows where (Python's stack on stderr).
    faulthandler.enable()
    os.environ.update({
        "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port), "RANK": str(rank),
        "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
        "LOCAL_SIZE": str(ranks)})
    sys.path.insert(0, str(HERE))
    import deepspeed
    import deepspeed.comm as dist
    import models

    torch.manual_seed(0)
    torch.set_num_threads(1)
    # DeepSpeed's CPU accelerator admits fp16 only where oneDNN has fp16
    # kernels (AVX512-FP16 or AMX-FP16); PyTorch computes in fp16 on any CPU,
    # more slowly, so the oracle lifts that gate.
    from deepspeed.accelerator import get_accelerator
    get_accelerator().is_fp16_supported = lambda: True
    # The ranks meet through a file store in the run's own folder, not a TCP
    # port that another process could take between _free_port and the
    # store's bind (MASTER_PORT still names DeepSpeed's shared memory).
    store = pathlib.Path(result_path).with_name("store")
    deepspeed.init_distributed(dist_backend="gloo",
                               init_method=f"file://{store}",
                               rank=rank, world_size=ranks)
    module = models.make_training_case(name).module
    engine, _, _, _ = deepspeed.initialize(
        model=module, model_parameters=[p for p in module.parameters()],
        config=config)
    # DeepSpeed's bf16 and fp16 engines hold the model in 16 bits and expect
    # 16-bit float inputs (its users cast them).
    half = (torch.bfloat16 if config.get("bf16", {}).get("enabled")
            else torch.float16 if config.get("fp16", {}).get("enabled")
            else None)
    if half is not None:
        data = {name: tensor.to(half) if tensor.is_floating_point() else tensor
                for name, tensor in data.items()}
    micro = engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()
    total = next(iter(data.values())).shape[0]
    records = []
    for step in range(steps):
        rows = _rank_rows(step, rank, ranks, micro, gas, total)
        batch = [tensor[rows] for tensor in data.values()]
        # The loss scale this step's backward uses (1 without fp16).
        scale = float(getattr(engine.optimizer, "loss_scale", 1.0))
        local = 0.0
        for g in range(gas):
            inputs = [t[g * micro:(g + 1) * micro] for t in batch]
            loss = engine(*inputs)
            engine.backward(loss)
            engine.step()
            local += loss.item()
        mean = torch.tensor([local / gas], dtype=torch.float64)
        dist.all_reduce(mean)
        # The gradients' global norm before clipping, where the engine
        # computes one (its ZeRO optimizers: the scaled norm over the scale
        # the step used, inf on a skipped step); None elsewhere.
        norm = engine.get_global_grad_norm()
        records.append({"loss": mean.item() / ranks, "scale": scale,
                        "skipped": not engine.was_step_applied(),
                        "grad_norm": None if norm is None else float(norm)})
    if rank == 0:
        pathlib.Path(result_path).write_text(json.dumps(records))
    dist.barrier()


def train_steps(name, config, data, steps, ranks):
    """Every step of DeepSpeed training model `name` of models.py with
    `config` (a dict) on `data` (name -> tensor, the model's inputs in order)
    for `steps` steps on `ranks` gloo ranks: a dict per step with its `loss`,
    the loss `scale` its backward used (1 without fp16), whether the
    engine `skipped` its update (gradients not finite) and the `grad_norm`
    the engine reports (None where it computes none)."""
    # DeepSpeed's run is deterministic, so a run whose worker died on a
    # signal (seen once in CI: a C++ `terminate` inside DeepSpeed 0.19.8 or
    # gloo at start-up, not reproduced in 30 runs) is run again, at most
    # twice, saying so; an error the worker raises is never retried.
    for attempt in range(3):
        with tempfile.TemporaryDirectory() as directory:
            result = pathlib.Path(directory) / "steps.json"
            port = _free_port()
            try:
                mp.start_processes(_worker, nprocs=ranks, start_method="spawn",
                                   args=(ranks, port, name, config,
                                         data, steps, str(result)))
            except mp.ProcessExitedException as error:
                if error.signal_name is None or attempt == 2:
                    raise
                print(f"deepspeed_oracle: {error}; running DeepSpeed again",
                      file=sys.stderr)
                continue
            finally:
                # The workers have exited (start_processes joins them).
                _remove_shared_memory(port)
            return json.loads(result.read_text())


def train(name, config, data, steps, ranks):
    """DeepSpeed's per-step losses (train_steps)."""
    return [step["loss"]
            for step in train_steps(name, config, data, steps, ranks)]
