"""Models the command-line tests load as ``pkg.module:factory`` (tests/ is on sys.path)."""

from __future__ import annotations

import torch

from seqattrib import demo


class Scaled(torch.nn.Module):
    """The demo model's outputs times a scale given as the model's second input."""

    def __init__(self) -> None:
        super().__init__()
        self.model = demo.torch_model()

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.model(x) * scale


def scaled() -> torch.nn.Module:
    return Scaled().eval()
