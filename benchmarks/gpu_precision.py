"""How far CUDA gradients are from a float64 CPU reference under torch's precision settings.

    python benchmarks/gpu_precision.py

BPNet-like model (L=200, 9 dilated layers), saliency of output 0 for 7 sequences; prints
max|g - g64| / max|g64| per setting (CPU float32 for scale).
"""

from __future__ import annotations

import contextlib

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
import torch

import seqattrib as sa
from seqattrib.backends.torch import core as torch_backend


def main() -> None:
    model = models.torch_model("bpnet", models.bpnet_weights(), "NCL")
    X = models.random_one_hot(7, 200, seed=3, layout="NCL")
    m64 = models.torch_model("bpnet", models.bpnet_weights(), "NCL").double()
    x = torch.from_numpy(X).double().requires_grad_(True)
    (g64,) = torch.autograd.grad(m64(x)[:, 0].sum(), x)
    g64 = g64.numpy()

    def error(g: np.ndarray) -> str:
        return f"{np.abs(g - g64).max() / np.abs(g64).max():.2e}"

    print("cpu float32:", error(sa.saliency(model, X)))
    print("cuda, seqattrib call:", error(sa.saliency(model, X, device="cuda")))
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    original = torch_backend._full_float32
    torch_backend._full_float32 = contextlib.nullcontext  # the settings below, untouched
    try:
        cudnn.allow_tf32 = matmul.allow_tf32 = False  # the legacy flags alone
        print(
            "cuda, legacy allow_tf32=False:",
            error(sa.saliency(model, X, device="cuda")),
            "(conv fp32_precision reads",
            repr(getattr(cudnn.conv, "fp32_precision", "?")) + ")",
        )
        for setting in ("tf32", "ieee"):
            for s in (cudnn.conv, cudnn.rnn, matmul):
                s.fp32_precision = setting
            print(f"cuda, fp32_precision={setting!r}:", error(sa.saliency(model, X, device="cuda")))
        cudnn.deterministic = True
        print("cuda, 'ieee' + cudnn.deterministic:", error(sa.saliency(model, X, device="cuda")))
    finally:
        torch_backend._full_float32 = original


if __name__ == "__main__":
    main()
