"""summon.Client's weight-sync RPCs (docs/api.md#weight-sync), as a mixin of
Client: publish, wait_version, read_slices. Client supplies `_call`,
`_summon` (the Summon stub), `_metadata` and `timeout`.

    client.publish("gpt", step)                           # the trainer
    v = client.wait_version("gpt", min_step=step, timeout=60)
    w, = client.read_slices("gpt", v, [SliceRequest("l0.w", [(0, 512), (0, 4096)], "bfloat16")])

On the daemon's host the answer comes through shared memory: the daemon
copies each slice from its shards straight into a memfd of this process's
(summon.SliceBuffer; `into=` reuses one), no gRPC data messages. Elsewhere
(or with local=False) it streams. With device="cuda:N" the daemon copies
into this process's GPU memory through CUDA IPC (summon.cuda_slices).

A bfloat16 slice comes back as uint16 bit patterns (NumPy has no bfloat16),
as every summon read does: `summon.dtypes.bfloat16_to_float32` widens it, or
`torch.from_numpy(a).view(torch.bfloat16)` shares it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional, Sequence

import grpc
import numpy as np

from summon import dtypes
from summon.errors import SummonError
from summon.fresh import fresh_array
from summon.messages import ReadSlicesStats
from summon.slice_buffer import HEADER_BYTES, MAGIC, SliceBuffer
from summon.v1 import summon_pb2, weight_sync_pb2


@dataclasses.dataclass(frozen=True)
class SliceRequest:
    """A box of one parameter: (start, length) per dimension, row-major,
    converted to `dtype` ("float32", "bfloat16", "float16", "float64"; None:
    the stored dtype)."""

    fqn: str
    box: Sequence[tuple[int, int]]
    dtype: Optional[str] = None


def _fit_error(header: Any, request: Any, capacity: int) -> SummonError:
    """The daemon's message for a buffer too small, for the streamed case."""
    needed = HEADER_BYTES + header.total_bytes
    for i, layout in enumerate(header.entries):
        end = HEADER_BYTES + layout.offset + layout.bytes
        if end > HEADER_BYTES + capacity:
            return SummonError("INVALID_ARGUMENT", f"entry {i} ('{request.entries[i].fqn}'): "
                               f"ends at byte {end} of the slice buffer, which has "
                               f"{HEADER_BYTES + capacity} bytes (the answer needs {needed}: "
                               "a 64-byte header and the packed entries)")
    return SummonError("INVALID_ARGUMENT", f"the slice buffer has {HEADER_BYTES + capacity} "
                       f"bytes; the answer needs {needed}")


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

    # How this client's ReadSlices answers came: "local_buffer", "stream"
    # or "cuda_buffer".
    slice_deliveries: collections.Counter

    def read_slices(self, model: str, version: int, entries: Sequence[SliceRequest],
                    into: Any = None, local: bool = True,
                    device: Any = None) -> list[Any]:
        """Each entry's box of version `version`, shaped like the box.

        The arrays are views into one packed buffer (each 16-byte aligned):
        `into` (valid until the next read into it) or a new one. On the
        daemon's host the daemon writes them into that shared memory itself
        (local=False: always the gRPC stream). Errors raise SummonError
        naming the entry ("entry 2 ('l0.w'): ..."), a buffer too small
        included; nothing is returned from a failed read, and `into`'s
        header is left incomplete (SliceBuffer.header().complete False).

        With `device` ("cuda:0"), torch tensors on that GPU instead: views
        of `into` (a flat uint8 CUDA tensor) or of a new one, which the
        daemon on this host fills through CUDA IPC (summon.cuda_slices;
        elsewhere, or without its GPU, read as above and copied in).
        """
        return self.read_slices_with_stats(model, version, entries, into, local, device)[0]

    def read_slices_with_stats(self, model: str, version: int, entries: Sequence[SliceRequest],
                               into: Any = None, local: bool = True, device: Any = None
                               ) -> tuple[list[Any], ReadSlicesStats]:
        """read_slices, with what the read moved between nodes."""
        if device is not None:
            return self._read_to_device(model, version, entries, into, device)
        arrays, stats, _ = self._read_host(model, version, entries, into, local)
        return arrays, stats

    def _read_to_device(self, model: str, version: int, entries: Sequence[SliceRequest],
                        into: Any, device: Any) -> tuple[list[Any], ReadSlicesStats]:
        import torch

        from summon import cuda_slices
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"read_slices(device=...) takes a CUDA device, not {device}")
        if into is None:
            into = torch.empty(cuda_slices.packed_bound(entries), dtype=torch.uint8,
                               device=device)
        elif not into.is_cuda:
            raise ValueError("read_slices(device=...) fills a CUDA tensor `into`, "
                             f"not one on {into.device}")
        target = (cuda_slices.cuda_target(into) if getattr(self, "_cuda_slices", True)
                  else None)
        return cuda_slices.read_into(self, model, version, entries, into, target)

    def _slices_request(self, model: str, version: int, entries: Sequence[SliceRequest],
                        local: bool) -> Any:
        if not hasattr(self, "slice_deliveries"):
            self.slice_deliveries = collections.Counter()
        request = weight_sync_pb2.ReadSlicesRequest(
            model=model, version=version,
            local_buffer=local and getattr(self, "_local_slices", True))
        for entry in entries:
            wire = request.entries.add(fqn=entry.fqn, dtype=dtypes.to_proto(entry.dtype))
            for start, length in entry.box:
                wire.box.add(start=start, length=length)
        return request

    def _read_host(self, model: str, version: int, entries: Sequence[SliceRequest],
                   into: Optional[SliceBuffer], local: bool
                   ) -> tuple[list[np.ndarray], ReadSlicesStats, Any]:
        """A read into host memory: the arrays, the stats, the first message."""
        request = self._slices_request(model, version, entries, local)
        call = self._summon.ReadSlices(request, timeout=self.timeout, metadata=self._metadata)
        try:
            header = next(call)
            if header.buffer_token:
                buffer = into if into is not None else SliceBuffer(header.total_bytes)
                try:
                    buffer.hand_over(header.buffer_socket, header.buffer_token)
                except SummonError as error:
                    call.cancel()
                    if error.code != "UNAVAILABLE":
                        raise
                    # Its socket is out of reach (a daemon behind a tunnel
                    # looks local): stream from now on.
                    self._local_slices = False
                    return self._read_host(model, version, entries, into, False)
                packed, stats = self._finish_local(call, header, buffer)
                if into is None:
                    buffer.close()  # The arrays keep the mapping.
            else:
                packed, stats = self._receive_stream(call, header, request, into)
        except grpc.RpcError as error:
            raise SummonError.from_rpc(error) from None
        except StopIteration:
            raise SummonError("INTERNAL", "empty ReadSlices stream") from None
        self.slice_deliveries["local_buffer" if stats.local_buffer else "stream"] += 1
        arrays = []
        for layout in header.entries:
            wire_dtype = dtypes.wire_numpy(dtypes.name_of(layout.dtype))
            view = packed[layout.offset:layout.offset + layout.bytes].view(wire_dtype)
            arrays.append(view.reshape(tuple(layout.shape)))
        return arrays, stats, header

    @staticmethod
    def _finish_local(call: Any, header: Any, buffer: SliceBuffer
                      ) -> tuple[np.ndarray, ReadSlicesStats]:
        """The rest of a read the daemon wrote into `buffer`: only stats come."""
        stats = None
        for message in call:
            if message.data:
                raise SummonError("INTERNAL", "ReadSlices streamed into a granted buffer")
            if message.HasField("stats"):
                stats = ReadSlicesStats(message.stats.slice_bytes, message.stats.peer_bytes,
                                        True)
        written = buffer.header()
        if (stats is None or written.magic != MAGIC or not written.complete
                or written.call != header.buffer_token[:8]
                or written.total_bytes != header.total_bytes):
            raise SummonError("DATA_LOSS", "ReadSlices ended without a complete buffer")
        return buffer.array()[HEADER_BYTES:HEADER_BYTES + header.total_bytes], stats

    @staticmethod
    def _receive_stream(call: Any, header: Any, request: Any, into: Optional[SliceBuffer]
                        ) -> tuple[np.ndarray, ReadSlicesStats]:
        """The data messages of a streamed read, into `into` or a new array."""
        if into is None:
            packed = fresh_array(header.total_bytes, np.uint8)
        else:
            if header.total_bytes > into.capacity:
                call.cancel()
                raise _fit_error(header, request, into.capacity)
            into._begin(request.version, header.total_bytes, len(header.entries))
            packed = into.array()[HEADER_BYTES:HEADER_BYTES + header.total_bytes]
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
        if received != header.total_bytes or stats is None:
            raise SummonError("DATA_LOSS", f"ReadSlices sent {received} of "
                              f"{header.total_bytes} bytes")
        if into is not None:
            into._complete()
        return packed, stats
