"""summon.Client's weight-sync RPCs (docs/api.md#weight-sync), as a mixin of
Client: publish, wait_version, read_slices. Client supplies `_call`,
`_summon` (the Summon stub), `_metadata` and `timeout`.

    client.publish("gpt", step)                           # the trainer
    v = client.wait_version("gpt", min_step=step, timeout=60)
    w, = client.read_slices("gpt", v, [SliceRequest("l0.w", [(0, 512), (0, 4096)], "bfloat16")])

A bfloat16 slice comes back as uint16 bit patterns (NumPy has no bfloat16),
as every summon read does: `summon.dtypes.bfloat16_to_float32` widens it, or
`torch.from_numpy(a).view(torch.bfloat16)` shares it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import grpc
import numpy as np

from summon import dtypes
from summon.errors import SummonError
from summon.fresh import fresh_array
from summon.v1 import summon_pb2, weight_sync_pb2


@dataclasses.dataclass(frozen=True)
class SliceRequest:
    """A box of one parameter: (start, length) per dimension, row-major,
    converted to `dtype` ("float32", "bfloat16", "float16", "float64"; None:
    the stored dtype)."""

    fqn: str
    box: Sequence[tuple[int, int]]
    dtype: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ReadSlicesStats:
    """What a read moved: the slices' own bytes, and how many of them the
    answering daemon received from other nodes (only the elements needed)."""

    slice_bytes: int
    peer_bytes: int


class WeightSyncCalls:
    """Publish, WaitVersion and ReadSlices (mixed into Client)."""

    _summon: Any
    _metadata: Any
    timeout: Optional[float]

    def _call(self, method: Any, request: Any, wait_for_ready: bool = False,
              timeout: Optional[float] = None) -> Any:  # pragma: no cover (Client's)
        raise NotImplementedError

    def publish(self, model: str, step: int) -> int:
        """Makes the parameters as they are now version `step` of `model`
        (immutable; at most summond --max-versions kept). Returns the version."""
        response = self._call(self._summon.Publish,
                              weight_sync_pb2.PublishRequest(model=model, step=step))
        return response.version

    def wait_version(self, model: str, min_step: int, timeout: float) -> int:
        """The newest version >= min_step, waiting up to `timeout` seconds for
        one (SummonError DEADLINE_EXCEEDED after)."""
        response = self._call(self._summon.WaitVersion,
                              weight_sync_pb2.WaitVersionRequest(model=model, min_step=min_step),
                              timeout=timeout)
        return response.version

    def read_slices(self, model: str, version: int,
                    entries: Sequence[SliceRequest]) -> list[np.ndarray]:
        """Each entry's box of version `version`, shaped like the box.

        The arrays are views into one packed buffer (each 16-byte aligned).
        Errors raise SummonError naming the entry ("entry 2 ('l0.w'): ...");
        nothing is returned from a failed read.
        """
        return self.read_slices_with_stats(model, version, entries)[0]

    def read_slices_with_stats(self, model: str, version: int, entries: Sequence[SliceRequest]
                               ) -> tuple[list[np.ndarray], ReadSlicesStats]:
        """read_slices, with what the read moved between nodes."""
        request = weight_sync_pb2.ReadSlicesRequest(model=model, version=version)
        for entry in entries:
            wire = request.entries.add(fqn=entry.fqn, dtype=dtypes.to_proto(entry.dtype))
            for start, length in entry.box:
                wire.box.add(start=start, length=length)
        call = self._summon.ReadSlices(request, timeout=self.timeout, metadata=self._metadata)
        try:
            header = next(call)
            packed = fresh_array(header.total_bytes, np.uint8)
            received = 0
            stats = None
            for message in call:
                if message.data:
                    end = received + len(message.data)
                    if end > len(packed):
                        raise SummonError("INTERNAL", "ReadSlices sent more than it announced")
                    packed[received:end] = np.frombuffer(message.data, np.uint8)
                    received = end
                if message.HasField("stats"):
                    stats = ReadSlicesStats(message.stats.slice_bytes, message.stats.peer_bytes)
        except grpc.RpcError as error:
            raise SummonError.from_rpc(error) from None
        except StopIteration:
            raise SummonError("INTERNAL", "empty ReadSlices stream") from None
        if received != header.total_bytes or stats is None:
            raise SummonError("DATA_LOSS", f"ReadSlices sent {received} of "
                              f"{header.total_bytes} bytes")
        arrays = []
        for layout in header.entries:
            wire_dtype = dtypes.wire_numpy(dtypes.name_of(layout.dtype))
            view = packed[layout.offset:layout.offset + layout.bytes].view(wire_dtype)
            arrays.append(view.reshape(tuple(layout.shape)))
        return arrays, stats
