"""The same-node read path: a read-only session's copy mapped into this process.

    with client.map_session(session.id) as m:     # only on summond's host
        w = m.read("layers.1.attn.qkv.weight")    # a copy at memory speed
        v = m["layers.1.attn.qkv.weight"]         # a read-only view, no copy

MapSession grants a one-time token; it is redeemed on the daemon's abstract
Unix socket for the copy's file descriptor (SCM_RIGHTS), which is mapped
read-only. The mapping is valid while the session is OPEN (docs/api.md,
MapSession): after the close the bytes stay readable until unmapped but are
the session's no longer.
"""

from __future__ import annotations

import mmap
import os
import socket
from typing import Any, Optional

import numpy as np

from summon import dtypes
from summon.errors import SummonError
from summon.messages import TensorInfo


def redeem(address: str, token: bytes) -> int:
    """The descriptor the daemon's broker hands over for `token` (caller closes it)."""
    name = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(name)
            sock.sendall(token)
            reply, fds, _, _ = socket.recv_fds(sock, 512, 1)
        except OSError as error:
            raise SummonError("UNAVAILABLE", f"cannot reach the daemon's map socket "
                              f"{address} ({error}): MapSession works on the daemon's "
                              "host only") from None
    if reply[:1] == b"K" and fds:
        return fds[0]
    for fd in fds:
        os.close(fd)
    raise SummonError("FAILED_PRECONDITION", "the daemon refused the map token: "
                      + reply[1:].decode(errors="replace"))


class SessionMapping:
    """A read-only session copy mapped into this process (Client.map_session)."""

    def __init__(self, grant: Any):
        self.tensors: dict[str, tuple[TensorInfo, int]] = {
            t.info.fqn: (TensorInfo.from_proto(t.info), t.byte_offset) for t in grant.tensors}
        self.size = grant.copy_bytes
        fd = redeem(grant.socket, grant.token)
        try:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._map: Optional[mmap.mmap] = (
                mmap.mmap(fd, self.size, flags=flags, prot=mmap.PROT_READ)
                if self.size else None)
        finally:
            os.close(fd)

    def __getitem__(self, fqn: str) -> np.ndarray:
        """A read-only view of tensor `fqn` in its stored dtype (bfloat16: uint16 bits)."""
        if fqn not in self.tensors:
            raise KeyError(f"the mapped session has no tensor '{fqn}'")
        if self._map is None:
            raise ValueError("the mapping is closed")
        info, offset = self.tensors[fqn]
        view = np.frombuffer(self._map, dtypes.wire_numpy(info.dtype), info.numel, offset)
        return view.reshape(info.shape)

    def read(self, fqn: str, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Tensor `fqn` copied into `out` (same dtype and size) or a new array."""
        view = self[fqn]
        if out is None:
            return view.copy()
        np.copyto(out.reshape(view.shape), view, casting="no")
        return out

    def close(self) -> None:
        """Unmaps now, or once the last view from [] is gone."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # Views still use it; it is unmapped when they go.
            self._map = None

    def __enter__(self) -> "SessionMapping":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
