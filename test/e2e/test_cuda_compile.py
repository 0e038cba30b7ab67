"""`sharc compile --target cuda` builds OUTDIR/train (compile and link only:
CI has no GPU, so nothing here runs a CUDA binary; tools/gpu-check.sh does).

For every model of models.py the binary is built for --cuda-arch sm_80 and
for sm_90.  Each binary must hold machine code (an ELF
cubin) for the requested architecture and PTX, as `cuobjdump --list-elf` and
`cuobjdump --list-ptx` list them, and must define sharcCreateCommunicator (the
NCCL communicator hook TrainMain.cpp calls).  The runtime library it links
carries sm_80 and sm_90 code and compute_90 PTX for both builds, so the
program's own code shows as one more cubin of the requested architecture than
of the other one, and for sm_80 as compute_80 PTX.

Without cuobjdump (the toolkit here has none; $SHARC_CUOBJDUMP or PATH or
/usr/local/cuda/bin), the entries are read from the binary's .nv_fatbin
section directly.  Skipped when there is no nvcc; ctest runs this file as
e2e-cuda-compile only when the build found nvcc and NCCL.  A model the code
generator cannot emit yet (the CNN's convolutions) is skipped, not failed.
"""

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess

import pytest

import models


def find_tool(name, env):
    for candidate in (os.environ.get(env), shutil.which(name),
                      f"/usr/local/cuda/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


NVCC = find_tool("nvcc", "SHARC_NVCC")
CUOBJDUMP = find_tool("cuobjdump", "SHARC_CUOBJDUMP")

pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc (CUDA toolkit)")

# (model, --cuda-arch): every model for sm_80 (A100) and sm_90 (H100/H200).
BUILDS = [(name, arch) for name in models.MODEL_NAMES for arch in ("sm_80", "sm_90")]
UNSUPPORTED = "is not supported by the code generator yet"


# --------------------------------------------------------------------------
# What a binary's fat binary holds: [(kind, arch)], kind "elf" or "ptx",
# arch the compute capability as an int (90 for sm_90 / compute_90).
# --------------------------------------------------------------------------


def entries_from_cuobjdump(binary):
    found = []
    for kind, flag in (("elf", "--list-elf"), ("ptx", "--list-ptx")):
        result = subprocess.run([CUOBJDUMP, flag, str(binary)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        for arch in re.findall(r"\.sm_(\d+)[a-z]?\.(?:cubin|ptx)\s*$",
                               result.stdout, re.MULTILINE):
            found.append((kind, int(arch)))
    return found


def nv_fatbin_section(binary):
    """The bytes of the ELF64 section .nv_fatbin (empty if none)."""
    data = pathlib.Path(binary).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, f"{binary}: not ELF64"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i):  # sh_name, sh_offset, sh_size
        fields = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return fields[0], fields[4], fields[5]

    names = section(shstrndx)[1]
    for i in range(shnum):
        name, offset, size = section(i)
        start = names + name
        if data[start:data.index(b"\0", start)] == b".nv_fatbin":
            return data[offset:offset + size]
    return b""


def entries_from_fatbin(binary):
    """Reads the fat binaries of .nv_fatbin: each a header (magic 0xBA55ED50,
    u16 version, u16 header size, u64 size of the entries) and entries (u16
    kind 1 = PTX, 2 = ELF, u16, u32 header size, u64 payload size, ..., u32
    architecture at byte 28), as cuobjdump lists them."""
    section = nv_fatbin_section(binary)
    found = []
    pos = 0
    while pos + 16 <= len(section):
        magic, _, header, size = struct.unpack_from("<IHHQ", section, pos)
        if magic != 0xBA55ED50:
            pos += 8  # fat binaries are 8-byte aligned
            continue
        entry, end = pos + header, pos + header + size
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from(
                "<HHIQ", section, entry)
            arch, = struct.unpack_from("<I", section, entry + 28)
            found.append(({1: "ptx", 2: "elf"}.get(kind, str(kind)), arch))
            entry += entry_header + payload
        pos = end
    return found


def fatbin_entries(binary):
    return (entries_from_cuobjdump(binary) if CUOBJDUMP
            else entries_from_fatbin(binary))


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda-compile")


@pytest.fixture(scope="module")
def exported(work):
    """Model name -> ONNX path (exported on first use)."""
    paths = {}

    def get(name):
        if name not in paths:
            path = work / f"{name}.onnx"
            models.export(models.make_training_case(name), path)
            paths[name] = path
        return paths[name]

    return get


@pytest.mark.parametrize("name,arch", BUILDS, ids=[f"{n}-{a}" for n, a in BUILDS])
def test_cuda_binary_is_built_for_arch(sharc, exported, work, name, arch):
    out = work / f"{name}-{arch}"
    result = sharc("compile", exported(name), "--target", "cuda",
                   "--cuda-arch", arch, "--optimizer", "adamw", "-o", out,
                   timeout=600)
    if result.returncode != 0 and UNSUPPORTED in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    binary = out / "train"
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert (out / "program.cu").is_file()
    assert not (out.parent / f"{out.name}.partial").exists()

    entries = fatbin_entries(binary)
    want = int(arch[3:])
    other = 80 if want == 90 else 90
    elf = [a for kind, a in entries if kind == "elf"]
    ptx = [a for kind, a in entries if kind == "ptx"]
    assert want in elf, (arch, entries)
    assert ptx, (arch, entries)
    # The runtime library contributes sm_80 and sm_90 alike; the program adds
    # one cubin for `arch` and its PTX.
    assert elf.count(want) > elf.count(other), (arch, entries)
    assert want in ptx, (arch, entries)

    symbols = subprocess.run(["nm", str(binary)], capture_output=True,
                             text=True, timeout=120)
    assert symbols.returncode == 0, symbols.stderr
    assert re.search(r"^\S+ T sharcCreateCommunicator$", symbols.stdout,
                     re.MULTILINE), "sharcCreateCommunicator is not linked"


def test_cuda_activation_epilogues_build(sharc, work):
    """The GEMM epilogues (bias + tanh-GELU with the pre-activation as aux
    output, bias + ReLU) in CUDA code: cuBLASLt's epilogues at run time."""
    path = work / "epilogues.onnx"
    models.make_epilogue_model(path)
    out = work / "epilogues-sm_90"
    result = sharc("compile", path, "--target", "cuda", "--optimizer", "adamw",
                   "-o", out, "--report", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "(3 with a bias or activation epilogue)" in result.stdout
    source = (out / "program.cu").read_text()
    assert "GemmActivation::geluTanh" in source and "args.aux = " in source
    assert (out / "train").is_file()


def test_cuda_dropout_builds(sharc, work):
    """Training-mode Dropout in CUDA code: the mask kernel calls
    runtime/Random.h's Philox (host and device) and the rows come from the
    communicator's rank, on two ranks."""
    from test_dropout import dropout_model, shapes
    path = work / "dropout.onnx"
    dropout_model(path)
    out = work / "dropout-sm_90"
    result = sharc("compile", path, "--target", "cuda", "--world-size", 2,
                   *shapes(4), "-o", out, timeout=600)
    assert result.returncode == 0, result.stderr
    source = (out / "program.cu").read_text()
    at = source.index("sharc::random::dropoutKeepBits(")
    kernel = re.findall(r"struct (K\d+) \{", source[:at])[-1]
    # Forward's mask and backward's own draw (sharc-regenerate-masks).
    assert len(re.findall(rf"\b{kernel}\{{", source)) == 2, kernel
    assert "ctx->comm->rank()" in source
    assert (out / "train").is_file()


def test_cuda_arch_errors(sharc, exported, work):
    path = exported("mlp")
    for arch, message in (
            ("sm_75", "--cuda-arch sm_75 is not supported"),
            ("compute_90", "--cuda-arch must look like sm_90")):
        out = work / f"bad-{arch}"
        result = sharc("compile", path, "--target", "cuda", "--cuda-arch",
                       arch, "-o", out)
        assert result.returncode == 1
        assert message in result.stderr, result.stderr
        assert not out.exists()


def test_fatbin_reader_matches_cuobjdump(work):
    """The built-in .nv_fatbin reader lists what cuobjdump lists (checked
    when both exist)."""
    if CUOBJDUMP is None:
        pytest.skip("no cuobjdump to compare the .nv_fatbin reader with")
    source = work / "kernel.cu"
    source.write_text("__global__ void k(float *x) { x[threadIdx.x] += 1; }\n"
                      "int main() { k<<<1, 1>>>(nullptr); }\n")
    binary = work / "kernel"
    result = subprocess.run(
        [NVCC, "-gencode=arch=compute_80,code=sm_80",
         "-gencode=arch=compute_90,code=sm_90",
         "-gencode=arch=compute_90,code=compute_90", str(source), "-o",
         str(binary)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(entries_from_fatbin(binary)) == sorted(
        entries_from_cuobjdump(binary))


@pytest.mark.parametrize("precision,arch", [("fp16", "sm_80"), ("bf16", "sm_90")])
def test_cuda_sixteen_bit_program_builds(sharc, exported, work, precision, arch):
    """A 16-bit training step compiles and links for the GPU, with machine
    code for the requested architecture (each precision for one of sm_80
    and sm_90, so both architectures build 16-bit kernels): f16/bf16 storage
    in the kernels, 16-bit GEMMs through cuBLASLt, and for fp16 the loss
    scaler's state and outputs."""
    out = work / f"gpt-{precision}-{arch}"
    result = sharc("compile", exported("gpt"), "--target", "cuda",
                   "--cuda-arch", arch, "--precision", precision,
                   "--optimizer", "adamw", "-o", out, timeout=600)
    if result.returncode != 0 and UNSUPPORTED in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    assert (out / "train").is_file()
    # The runtime library holds sm_80 and sm_90 code alike; the program adds
    # one cubin of `arch` (test_cuda_binary_is_built_for_arch).
    elf = [a for kind, a in fatbin_entries(out / "train") if kind == "elf"]
    want, other = int(arch[3:]), (90 if arch == "sm_80" else 80)
    assert elf.count(want) > elf.count(other), elf
    source = (out / "program.cu").read_text()
    storage = "sharc::kern::f16" if precision == "fp16" else "sharc::kern::bf16"
    assert storage in source
    assert f"DType::{'f16' if precision == 'fp16' else 'bf16'}" in source
    manifest = json.loads((out / "manifest.json").read_text())
    states = {buffer["name"] for buffer in manifest["buffers"]
              if buffer["role"] == "state"}
    assert "skipped_steps" in states
    assert ("loss_scale" in states) == (precision == "fp16")


@pytest.mark.parametrize("stage,arch,device,precision", [
    (2, "sm_80", "cpu", "fp32"), (3, "sm_90", "cpu", "fp32"),
    (2, "sm_90", "nvme", "fp32"), (1, "sm_90", "cpu", "bf16"),
    (3, "sm_80", "cpu+param", "bf16"), (3, "sm_90", "nvme+param", "bf16")])
def test_cuda_optimizer_offload_builds(sharc, exported, work, stage, arch, device,
                                       precision):
    """ZeRO-Offload to the CPU on the CUDA target: the step keeps the
    optimizer state in pinned host memory and runs its update on the host
    (the kernel's host twin, launchHost) on copies of its inputs, copying the
    new parameter slices back: it compiles and links for the GPU, and the
    report states the pinned host bytes and the bytes copied per step.  The
    same program runs on the CPU target with --host-update
    (test_offload.py).  With NVMe the state's files are read into pinned host
    memory and the same update runs there.  Under bf16 the fp32 master
    slices go to the host too, and the step carries their bf16 copies on
    the device (computed on the host, copied back), or with offload_param
    in host memory or in files."""
    out = work / f"gpt-offload-{stage}-{arch}-{device}-{precision}"
    folder = ["--nvme-path", work] if device == "nvme" else []
    if device == "cpu+param":
        # ZeRO stage 3's offload_param: the bf16 slices the gathers read stay
        # in pinned host memory too, copied to the device for each gather.
        device, folder = "cpu", ["--offload-param", "cpu"]
    if device == "nvme+param":
        # offload_param to NVMe: the bf16 slices in files too, read into
        # pinned host memory and copied to the device for each gather.
        device, folder = "nvme", ["--nvme-path", work, "--offload-param", "nvme"]
    result = sharc("compile", exported("gpt"), "--target", "cuda",
                   "--cuda-arch", arch, "--optimizer", "adamw",
                   "--world-size", 2, "--zero-stage", stage,
                   "--param-persistence-threshold", 0,
                   "--offload-optimizer", device, *folder, "--precision", precision,
                   "-o", out, "--report", timeout=600)
    if result.returncode != 0 and UNSUPPORTED in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    elf = [a for kind, a in fatbin_entries(out / "train") if kind == "elf"]
    assert int(arch[3:]) in elf, elf
    source = (out / "program.cu").read_text()
    assert "sharc::kern::launchHost(" in source
    assert "sharc::kern::transferStart(" in source
    manifest = json.loads((out / "manifest.json").read_text())
    storage = "host" if device == "cpu" else "nvme"
    moved = [b for b in manifest["buffers"] if b["storage"] == storage]
    assert moved and all(b["role"] == "state" or precision == "bf16" for b in moved)
    copies = [b for b in manifest["buffers"] if "derived_from" in b]
    assert bool(copies) == (precision == "bf16")
    assert {b["derived_from"] for b in copies} == \
        {b["name"] for b in moved if b["role"] == "param"}
    assert all(b["storage"] == ("nvme" if "--offload-param" in folder and
                                device == "nvme" else "device"
                                if "--offload-param" not in folder else "host")
               for b in copies)
    assert manifest["host_bytes"] == (sum(b["bytes"] for b in moved)
                                      if device == "cpu" else 0)
    assert manifest["transfer_bytes_per_step"] > 0
    line = re.search(r"^report: per rank memory: cuda device (\d+) bytes .*?, "
                     r"pinned host (\d+), NVMe (\d+); moved per step: PCIe (\d+),",
                     result.stdout, re.MULTILINE)
    assert line, result.stdout
    assert int(line.group(2)) == manifest["host_bytes"] + manifest["host_arena_bytes"]
    assert int(line.group(3)) == manifest["nvme_bytes"]
    assert int(line.group(4)) == manifest["transfer_bytes_per_step"]


def test_cuda_checkpoints_in_host_memory_build(sharc, exported, work):
    """DeepSpeed's cpu_checkpointing on the CUDA target: the recomputed
    layers' inputs go to pinned host memory after their forward and come
    back for their backward (docs/recompute.md); the program compiles and
    links for sm_90, and the manifest's host arena and bytes moved are what
    the report states (the same program runs on the CPU with --host-update,
    test_recompute.py)."""
    out = work / "gpt-cpu-checkpointing"
    config = work / "cpu-checkpointing.json"
    config.write_text(json.dumps(
        {"activation_checkpointing": {"cpu_checkpointing": True}}))
    result = sharc("compile", exported("gpt"), "--target", "cuda",
                   "--cuda-arch", "sm_90", "--optimizer", "adamw",
                   "--config", config, "-o", out, "--report", timeout=600)
    if result.returncode != 0 and UNSUPPORTED in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    assert 90 in [a for kind, a in fatbin_entries(out / "train") if kind == "elf"]
    assert "sharc::kern::transferStart(" in (out / "program.cu").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["host_bytes"] == 0 and manifest["host_arena_bytes"] > 0
    # Out and back once each step.
    assert manifest["transfer_bytes_per_step"] == 2 * manifest["host_arena_bytes"]
    assert "kept in pinned host memory between forward and backward" in result.stdout
