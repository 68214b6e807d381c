"""Element types: summon's names, the wire enum, and NumPy's view of them.

summon names dtypes as core does ("float32", "bfloat16", ...). NumPy has no
bfloat16, so on the wire and in raw reads a bfloat16 tensor is its uint16 bit
pattern; `bfloat16_to_float32` widens it exactly and `float32_to_bfloat16`
rounds to nearest even, as the daemon does.
"""

from __future__ import annotations

import numpy as np

from summon.v1 import types_pb2

FLOATING = ("float32", "float64", "float16", "bfloat16")

# NumPy dtype holding each floating type's wire bytes (little-endian).
_WIRE_NUMPY = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),
}

_ALIASES = {
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f64": "float64", "fp64": "float64", "double": "float64",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
}


def name_of(value: int) -> str:
    """"float32" for DTYPE_FLOAT32; "" for DTYPE_UNSPECIFIED."""
    if value == types_pb2.DTYPE_UNSPECIFIED:
        return ""
    return types_pb2.DType.Name(value)[len("DTYPE_"):].lower()


def to_proto(name: str | None) -> int:
    """The DType enum value of a dtype name (None or "": DTYPE_UNSPECIFIED)."""
    if not name:
        return types_pb2.DTYPE_UNSPECIFIED
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    try:
        return types_pb2.DType.Value("DTYPE_" + key.upper())
    except ValueError:
        raise ValueError(f"unknown dtype {name!r}; summon's dtypes are "
                         f"{', '.join(FLOATING)} (and, refused by R14, "
                         "the integer and bool types)") from None


def wire_numpy(name: str) -> np.dtype:
    """The NumPy dtype of a floating dtype's wire bytes (bfloat16: uint16 bits)."""
    try:
        return _WIRE_NUMPY[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a floating dtype summon stores") from None


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact float32 values of bfloat16 bit patterns (uint16)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values, rounding to nearest even."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = np.isnan(bits.view(np.float32))
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)
