"""The one rule for tensor writes, shared by every Python write path.

A whole-tensor write carries exactly the tensor's shape: no implicit
reshape, no broadcast, no short write. A partial write names its element
range explicitly (`offset`, the first element of the flattened tensor, and
the data's element count), within the tensor. A mismatch is a SummonError
INVALID_ARGUMENT naming both shapes (OUT_OF_RANGE for a range outside the
tensor, as the daemon answers), raised before anything is sent.
"""

from __future__ import annotations

from typing import Sequence

from summon.errors import SummonError


def check_whole_write(fqn: str, tensor_shape: Sequence[int],
                      data_shape: Sequence[int]) -> None:
    """INVALID_ARGUMENT unless the data has exactly the tensor's shape."""
    if tuple(tensor_shape) != tuple(data_shape):
        raise SummonError(
            "INVALID_ARGUMENT",
            f"'{fqn}' has shape {list(tensor_shape)}, the data has shape "
            f"{list(data_shape)}: a whole-tensor write needs the exact shape (R5); "
            "reshape the data yourself, or write a range with offset=")


def check_range(fqn: str, numel: int, offset: int, count: int) -> None:
    """OUT_OF_RANGE unless [offset, offset + count) lies within the tensor."""
    if offset < 0 or count < 0 or offset + count > numel:
        raise SummonError(
            "OUT_OF_RANGE",
            f"elements [{offset}, {offset + count}) are outside '{fqn}' "
            f"({numel} elements)")
