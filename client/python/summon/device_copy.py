"""A session's copy on one GPU, opened through CUDA IPC.

On a node whose shards are in GPU memory (summond --device cuda) a session's
copy is gathered into GPU memory, one copy on every GPU of the node's ranks
(docs/design.md#placement; the home GPU only under rank0_only). A trainer
process on the daemon's host opens the copy on its own GPU and computes on
the full parameters there, as a rank does inside FSDP's summon_full_params:

    copy = DeviceSessionCopy(client, session.id, rank=my_rank)
    logits = functional_call(model, copy.tensors, batch)
    copy.close()

The tensors are CUDA tensors over the daemon's memory (no copy); the
client's close_session closes the copy first (the daemon frees it then, and
CUDA leaves freeing memory another process still maps undefined). A writable
session's edits made here are written back at close into the ranks whose
shards are on this GPU, each rank its own slice (FSDP's writeback); a
read-only session's copy must only be read: CUDA cannot make device memory
read-only for another process, its edits are never written back, and a
session that shared the gather before it was mapped would see them. The
mapping is valid while the session is OPEN: keep its lease renewed.
"""

from __future__ import annotations

from typing import Optional

import torch

from summon import cuda_ipc
from summon.client import Client
from summon.messages import TensorInfo
from summon.torch import torch_dtype


class DeviceSessionCopy:
    """One GPU's copy of a session: `tensors[fqn]` shaped as the parameter."""

    def __init__(self, client: Client, session_id: str, rank: Optional[int] = None,
                 device: Optional[int] = None, grad: bool = False):
        """Opens the copy on the GPU of `rank` (a rank held by the daemon),
        else on `device`, else on torch's current device."""
        grant = client.grant_device_copies(session_id, grad)
        chosen = None
        for copy in grant.device_copies:
            if rank is not None and rank in copy.ranks:
                chosen = copy
            elif rank is None and copy.device == (
                    torch.cuda.current_device() if device is None else device):
                chosen = copy
        if chosen is None:
            held = ", ".join(f"device {c.device} (ranks {list(c.ranks)})"
                             for c in grant.device_copies)
            wanted = f"rank {rank}" if rank is not None else f"device {device}"
            raise ValueError(f"session {session_id} has no copy for {wanted}; "
                             f"the daemon holds: {held}")
        client.before_close(session_id, self.close)
        self.device: int = chosen.device
        self.ranks: list[int] = list(chosen.ranks)
        self._allocation = cuda_ipc.open_allocation(chosen.device, chosen.ipc_handle,
                                                    grant.copy_bytes)
        self.infos: dict[str, TensorInfo] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        for mapped in grant.tensors:
            info = mapped.info
            flat = cuda_ipc.flat_view(self._allocation, torch_dtype(info.dtype),
                                      mapped.byte_offset, info.numel)
            assert flat is not None
            self.infos[info.fqn] = info
            self.tensors[info.fqn] = flat.view(info.shape)

    def __getitem__(self, fqn: str) -> torch.Tensor:
        return self.tensors[fqn]

    def close(self) -> None:
        """Unmaps the copy; its tensors must not be used afterwards."""
        self.tensors.clear()
        if self._allocation is not None:
            self._allocation.close()
            self._allocation = None

    def __enter__(self) -> "DeviceSessionCopy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
