"""What the PyTorch GPU checks (tests/gpu/torch_*_check.py) share: the import
paths of the summon package and the seeded values, the model they create,
and one printed line per check with a running count of failures."""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "..", "client", "python"))
sys.path.insert(0, os.path.join(_HERE, "..", "python"))

SEED = 7
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.w", "shape": [1000, 64], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
        {"fqn": "layers.0.w", "shape": [256, 256], "dtype": "float32"},
        {"fqn": "layers.0.b", "shape": [256], "dtype": "float32"}]}]}
SHAPES = {"embed.w": (1000, 64), "layers.0.w": (256, 256), "layers.0.b": (256,)}


class Checks:
    """Prints `OK  what` or `FAIL what` per check and counts the failures."""

    def __init__(self, name: str):
        self.name = name
        self.failures = 0

    def __call__(self, what: str, ok: bool, detail: str = "") -> None:
        self.failures += 0 if ok else 1
        print(f"{'OK  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}",
              flush=True)

    def exit_code(self) -> int:
        print(f"{self.name}: {self.failures} failed", flush=True)
        return 1 if self.failures else 0
