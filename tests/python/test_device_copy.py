"""summon.device_copy.DeviceSessionCopy without a GPU: the CUDA IPC open is
cut (cuda_ipc.open_allocation returns host bytes), everything else is real.
The session's layout and bytes come from a live summond's host copy; the
same bytes stand in for the copies on two GPUs, with distinct edits so the
test can tell which GPU's copy a view reads. The GPU run of the same class
is tests/gpu/torch_session_copy_check.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import summon
from summon import cuda_ipc
from summon.device_copy import DeviceSessionCopy
from summon.messages import DeviceCopy, DeviceCopyGrant, MappedTensor, TensorInfo
from summon.v1 import summon_pb2, types_pb2
from seeded import seeded_float32

SEED = 5
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.w", "shape": [9, 4], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
        {"fqn": "layers.0.w", "shape": [5, 7], "dtype": "float32"},
        {"fqn": "layers.0.b", "shape": [5], "dtype": "float32"}]}]}
SHAPES = {"embed.w": (9, 4), "layers.0.w": (5, 7), "layers.0.b": (5,)}


class HostBytes:
    """What cuda_ipc.open_allocation returns, over host memory."""

    def __init__(self, data: np.ndarray):
        self.tensor = torch.from_numpy(data)
        self.closed = False

    def close(self) -> None:
        self.closed = True


class StandIn:
    """A client whose grant lists two GPUs' copies of a real host copy."""

    def __init__(self, grant: Any):
        self.grant = grant
        self.before: list[Any] = []

    def grant_device_copies(self, session_id: str, grad: bool = False) -> Any:
        return self.grant

    def before_close(self, session_id: str, callback: Any) -> None:
        self.before.append((session_id, callback))


@pytest.fixture
def two_gpus(client: summon.Client, monkeypatch: pytest.MonkeyPatch):
    client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
    session = client.open_session("m", writeback=False)
    grant = client._call(client._summon.MapSession, summon_pb2.MapSessionRequest(
        session_id=session.id, host_copy_only=True))
    copy = np.zeros(grant.copy_bytes, np.uint8)
    with client.map_session(session.id) as mapping:
        for tensor in grant.tensors:
            values = mapping.read(tensor.info.fqn).reshape(-1)
            copy[tensor.byte_offset:tensor.byte_offset + values.nbytes] = values.view(np.uint8)
    client.close_session(session.id)
    device_grant = summon_pb2.MapSessionResponse(copy_bytes=grant.copy_bytes)
    device_grant.tensors.extend(grant.tensors)
    on_device = {}
    for device, ranks in ((0, [0]), (1, [1, 2])):
        device_grant.device_copies.add(device=device, ranks=ranks,
                                       ipc_handle=bytes([device]) * 64)
        on_device[device] = HostBytes(copy.copy())
    # Device 1's copy differs in one element, as after a trainer's edit.
    offsets = {t.info.fqn: t.byte_offset for t in grant.tensors}
    on_device[1].tensor[offsets["layers.0.b"]:offsets["layers.0.b"] + 4] = torch.from_numpy(
        np.array([42.0], np.float32).view(np.uint8))
    opened: list[tuple[int, bytes, int]] = []

    def open_allocation(device: int, handle: bytes, size: int) -> HostBytes:
        opened.append((device, handle, size))
        return on_device[device]

    monkeypatch.setattr(cuda_ipc, "open_allocation", open_allocation)
    return StandIn(DeviceCopyGrant.from_proto(device_grant)), on_device, opened


def test_the_copy_on_a_ranks_gpu_views_every_tensor_in_place(two_gpus: Any) -> None:
    stand_in, on_device, opened = two_gpus
    seeded = {f: seeded_float32(f, SEED, int(np.prod(s))).reshape(s) for f, s in SHAPES.items()}
    with DeviceSessionCopy(stand_in, "s", rank=2) as copy:
        assert (copy.device, copy.ranks) == (1, [1, 2])
        assert opened == [(1, bytes([1]) * 64, stand_in.grant.copy_bytes)]
        assert {f: tuple(t.shape) for f, t in copy.tensors.items()} == SHAPES
        for fqn in ("embed.w", "layers.0.w"):
            np.testing.assert_array_equal(copy[fqn].numpy(), seeded[fqn])
        expected_bias = seeded["layers.0.b"].copy()
        expected_bias[0] = 42.0
        np.testing.assert_array_equal(copy["layers.0.b"].numpy(), expected_bias)
        copy["layers.0.w"][0, 0] = -1.0  # A view, not a copy: the memory changes.
        assert on_device[1].tensor.numpy()[:].view(np.float32).tolist().count(-1.0) == 1
    assert on_device[1].closed and not on_device[0].closed
    assert [(session, callback.__self__) for session, callback in stand_in.before] == [
        ("s", copy)]  # Closed again, harmlessly, when the client closes "s".
    with DeviceSessionCopy(stand_in, "s", device=0) as copy:
        np.testing.assert_array_equal(copy["layers.0.b"].numpy(), seeded["layers.0.b"])


def test_the_grant_is_plain_python_like_every_other_answer() -> None:
    reply = summon_pb2.MapSessionResponse(copy_bytes=96)
    reply.tensors.add(byte_offset=64).info.CopyFrom(
        types_pb2.TensorInfo(fqn="layers.0.b", shape=[4], numel=4,
                             dtype=types_pb2.DTYPE_FLOAT32))
    reply.device_copies.add(device=1, ranks=[1, 2], ipc_handle=b"h" * 64)
    grant = DeviceCopyGrant.from_proto(reply)
    assert grant == DeviceCopyGrant(
        copy_bytes=96,
        tensors=(MappedTensor(TensorInfo("layers.0.b", "float32", (4,), 4), 64),),
        device_copies=(DeviceCopy(device=1, ranks=(1, 2), ipc_handle=b"h" * 64),))


def test_a_rank_without_a_copy_is_named_with_what_there_is(two_gpus: Any) -> None:
    stand_in, _, opened = two_gpus
    with pytest.raises(ValueError) as error:
        DeviceSessionCopy(stand_in, "s", rank=3)
    assert str(error.value) == ("session s has no copy for rank 3; the daemon holds: "
                                "device 0 (ranks [0]), device 1 (ranks [1, 2])")
    assert opened == []


def test_close_session_runs_what_must_happen_before_it(client: summon.Client) -> None:
    """DeviceSessionCopy unmaps through this hook while the session is OPEN."""
    client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
    session = client.open_session("m", writeback=False)
    seen: list[str] = []
    client.before_close(session.id, lambda: seen.append(client.get_session(session.id).state))
    client.close_session(session.id)
    assert seen == ["OPEN"]
    other = client.open_session("m", writeback=False)
    client.close_session(other.id)
    assert seen == ["OPEN"]  # Hooks belong to their session and run once.
