"""A same-host shared-memory buffer that ReadSlices answers into
(docs/api.md#weight-sync): the daemon copies each slice from its shards
straight into it, with no gRPC messages and no copies in this process.

    buffer = summon.SliceBuffer(256 << 20)      # capacity of the packed answer
    w, b = client.read_slices("gpt", v, requests, into=buffer)   # views into it

It is a memfd (nothing under /dev/shm to leave behind), sealed against
shrinking so the daemon can write into it safely. The daemon writes a
64-byte header first ("being written") and marks it complete only after the
last entry, so a failed read leaves nothing that reads as data; arrays
returned by a read into it are valid until the next read into it.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
from typing import NamedTuple, Optional

import numpy as np

from summon.errors import SummonError

HEADER_BYTES = 64
MAGIC = b"SUMSLICE"


class SliceBufferHeader(NamedTuple):
    """The buffer's header (weight_sync.proto, SliceBufferHeader)."""

    magic: bytes
    complete: bool
    version: int
    total_bytes: int
    entries: int
    call: bytes


class SliceBuffer:
    """`capacity` bytes of packed slices (plus the header) in shared memory."""

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"capacity {capacity} is negative")
        self.size = HEADER_BYTES + capacity
        self._fd: Optional[int] = os.memfd_create(
            "summon-slices", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self._fd, self.size)
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            self._map: Optional[mmap.mmap] = mmap.mmap(self._fd, self.size,
                                                       flags=mmap.MAP_SHARED)
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def capacity(self) -> int:
        """Bytes available for the packed answer (after the header)."""
        return self.size - HEADER_BYTES

    def array(self) -> np.ndarray:
        """The whole buffer, header included, as uint8 (a view)."""
        if self._map is None:
            raise ValueError("the slice buffer is closed")
        return np.frombuffer(self._map, np.uint8)

    def header(self) -> SliceBufferHeader:
        """The header as the last read left it."""
        raw = bytes(self.array()[:HEADER_BYTES])
        state, version, total, entries = struct.unpack_from("<Qqqq", raw, 8)
        return SliceBufferHeader(raw[:8], state == 1, version, total, entries, raw[40:48])

    def hand_over(self, address: str, token: bytes) -> None:
        """Sends the buffer's descriptor with `token` to the daemon's broker
        socket ("@name": abstract), for the ReadSlices call that granted it."""
        if self._fd is None:
            raise ValueError("the slice buffer is closed")
        name = "\0" + address[1:] if address.startswith("@") else address
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(name)
                socket.send_fds(sock, [token], [self._fd])
                reply = sock.recv(512)
            except OSError as error:
                raise SummonError("UNAVAILABLE", f"cannot reach the daemon's socket "
                                  f"{address} ({error})") from None
        if reply[:1] != b"K":
            raise SummonError("FAILED_PRECONDITION", "the daemon refused the slice buffer: "
                              + reply[1:].decode(errors="replace"))

    # Used when the daemon answered with data messages (not on its host):
    # the same header protocol, kept by this process.
    def _begin(self, version: int, total: int, entries: int) -> None:
        view = self.array()
        view[8:16] = 0
        view[:HEADER_BYTES] = np.frombuffer(
            MAGIC + struct.pack("<Qqqq", 0, version, total, entries) + bytes(24), np.uint8)

    def _complete(self) -> None:
        self.array()[8:16] = np.frombuffer(struct.pack("<Q", 1), np.uint8)

    def close(self) -> None:
        """Unmaps the buffer (arrays still viewing it keep it alive)."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # Views still export it: freed with the last of them.
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SliceBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
