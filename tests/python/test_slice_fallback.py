"""ReadSlices into a SliceBuffer when the daemon's buffer socket is out of
reach (a daemon behind a tunnel, in another network namespace): the read is
answered again as a stream, and the client asks for the stream from then on.

The daemon here is a stand-in gRPC server that grants the buffer at a socket
nobody listens on: a second host (or namespace) is what it cuts, and only
the client's side of the exchange is under test.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures
from typing import Iterator

import grpc
import numpy as np
import pytest

import summon
from summon import SliceBuffer, SliceRequest
from summon.v1 import summon_pb2_grpc, types_pb2, weight_sync_pb2

VALUES = np.arange(12, dtype=np.float32) * 0.5 - 2.0


class GrantingServicer(summon_pb2_grpc.SummonServicer):
    """Grants every local-buffer read at an unreachable socket, then waits for
    the caller's cancel; streams every other read."""

    def __init__(self) -> None:
        self.asks: list[bool] = []
        self.lock = threading.Lock()

    def ReadSlices(self, request, context) -> Iterator[weight_sync_pb2.ReadSlicesResponse]:
        with self.lock:
            self.asks.append(request.local_buffer)
        header = weight_sync_pb2.ReadSlicesResponse(total_bytes=VALUES.nbytes)
        header.entries.add(offset=0, bytes=32, dtype=types_pb2.DTYPE_FLOAT32, shape=[8])
        header.entries.add(offset=32, bytes=16, dtype=types_pb2.DTYPE_FLOAT32, shape=[2, 2])
        if request.local_buffer:
            header.buffer_socket = f"@summon-unreachable-{os.getpid()}"
            header.buffer_token = b"fake-token-of-this-call"
            yield header
            give_up = time.monotonic() + 10
            while context.is_active() and time.monotonic() < give_up:
                time.sleep(0.005)
            return
        yield header
        yield weight_sync_pb2.ReadSlicesResponse(data=VALUES.tobytes())
        yield weight_sync_pb2.ReadSlicesResponse(
            stats=weight_sync_pb2.ReadSlicesStats(slice_bytes=VALUES.nbytes))


@pytest.fixture
def granting() -> Iterator[tuple[str, GrantingServicer]]:
    servicer = GrantingServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    summon_pb2_grpc.add_SummonServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_an_unreachable_buffer_socket_falls_back_to_the_stream(granting) -> None:
    address, servicer = granting
    client = summon.Client(address, timeout=20)
    buffer = SliceBuffer(64)
    entries = [SliceRequest("a", [(0, 8)]), SliceRequest("b", [(0, 2), (0, 2)])]
    for _ in range(2):
        arrays = client.read_slices("m", 3, entries, into=buffer)
        np.testing.assert_array_equal(arrays[0], VALUES[:8])
        np.testing.assert_array_equal(arrays[1], VALUES[8:].reshape(2, 2))
        header = buffer.header()
        assert header.complete
        assert header.total_bytes == VALUES.nbytes
    # The buffer asked for once, then the stream (that read again, and the
    # next read at once).
    assert servicer.asks == [True, False, False]
    assert client.slice_deliveries == {"stream": 2}
    buffer.close()
