"""summon's seeded init (docs/api.md section 9), vectorised: the values a
model created with init "seeded:S" holds, computed independently of summond."""

from __future__ import annotations

import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def _fnv1a64(text: str) -> int:
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return h


def seeded_float32(fqn: str, seed: int, numel: int) -> np.ndarray:
    """Elements 0..numel-1 of parameter `fqn` under seed `seed`, as float32."""
    x = _fnv1a64(fqn) ^ ((seed * _GOLDEN) & _MASK)
    with np.errstate(over="ignore"):
        v = np.uint64(x) + np.arange(numel, dtype=np.uint64) + np.uint64(_GOLDEN)
        v = (v ^ (v >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        v = (v ^ (v >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        v = v ^ (v >> np.uint64(31))
    return ((v >> np.uint64(40)).astype(np.float64) / 2.0**24 - 0.5).astype(np.float32)

