"""A model the command-line tests load as ``slow_models:sleepy`` (tests/ on PYTHONPATH): slow
enough per batch that a run can be interrupted half way."""

from __future__ import annotations

import time

import torch

from seqattrib import demo


class Sleepy(torch.nn.Module):
    """The demo model, taking 50 ms more per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.model = demo.torch_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.05)
        return self.model(x)


def sleepy() -> torch.nn.Module:
    return Sleepy().eval()


class Deaf(Sleepy):
    """The sleepy model, swallowing a Ctrl-C that lands in its forward pass, as C code of a
    framework or a file library may."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        return self.model(x)


def deaf() -> torch.nn.Module:
    return Deaf().eval()
