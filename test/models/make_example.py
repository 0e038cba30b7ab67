"""Writes the bundled example: a tiny GPT-style model whose single output is
the training loss, and one batch of inputs for it.

    python3 test/models/make_example.py [OUTPUT_DIR]

creates tiny-gpt.onnx, tiny-gpt-tokens.npy and tiny-gpt-targets.npy (by
default next to this script).  The model is models.py's GPT (vocabulary 64,
16 positions, width 32, 2 heads, 2 blocks) exported at opset 17 with seed 0;
try it with

    sharc eval test/models/tiny-gpt.onnx \\
        --input tokens=test/models/tiny-gpt-tokens.npy \\
        --input targets=test/models/tiny-gpt-targets.npy
"""

import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))

import models  # noqa: E402

CONFIG = models.GptConfig(vocab=64, seq=16, dim=32, heads=2, layers=2, batch=2)


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out.mkdir(parents=True, exist_ok=True)
    case = models.make_case("gpt", seed=0, gpt_config=CONFIG)
    models.export(case, out / "tiny-gpt.onnx")
    np.save(out / "tiny-gpt-tokens.npy", case.inputs["tokens"].numpy())
    np.save(out / "tiny-gpt-targets.npy", case.inputs["targets"].numpy())
    print(f"wrote {out / 'tiny-gpt.onnx'} "
          f"({(out / 'tiny-gpt.onnx').stat().st_size} bytes); "
          f"PyTorch loss {models.reference_loss(case):.9g}")


if __name__ == "__main__":
    main()
