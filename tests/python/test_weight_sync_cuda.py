"""ReadSlices into a CUDA buffer (weight_sync.proto, cuda_buffer;
docs/api.md#weight-sync) against a real summond on a machine without a GPU,
and the client side that runs without one (summon.cuda_slices).

- The daemon refuses a cuda_buffer read with FAILED_PRECONDITION naming the
  device and the way out, sends nothing, writes nothing, and then answers a
  normal ReadSlices as ever.
- read_slices into a tensor falls back on that refusal to the usual read,
  copies the bytes into the same tensor at the layout's offsets, and asks
  that daemon through CUDA no more; any other refusal is raised.
- torch's IPC handles are read as weight_sync.proto wants them.
The GPU half (the daemon writing into a torch CUDA tensor) is
tests/gpu/weight_sync_ipc_check.py.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import torch

import summon
from summon import SliceRequest, cuda_slices
from summon.v1 import weight_sync_pb2
from test_weight_sync import LAYOUT, SEED, box, seeded
from test_weight_sync_shm import REQUESTS, expected

REFUSAL_START = "cuda_buffer: no CUDA device 0 on the daemon's host ("
REFUSAL_END = "); read through local_buffer or the stream instead"


@pytest.fixture
def sync(start_daemon) -> summon.Client:
    daemon = start_daemon(local_ranks=2)
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        client.publish("m", 5)
        yield client


def target(capacity: int) -> weight_sync_pb2.CudaIpcBuffer:
    return weight_sync_pb2.CudaIpcBuffer(device=0, ipc_handle=bytes(range(64)), offset=0,
                                         bytes=capacity)


def test_a_daemon_without_a_gpu_refuses_and_keeps_serving(sync: summon.Client) -> None:
    request = sync._slices_request("m", 5, REQUESTS, local=False)
    request.cuda_buffer.CopyFrom(target(4096))
    with pytest.raises(grpc.RpcError) as error:
        list(sync._summon.ReadSlices(request, timeout=30))  # Not one message.
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.value.details().startswith(REFUSAL_START), error.value.details()
    assert error.value.details().endswith(REFUSAL_END), error.value.details()
    # Both destinations at once: refused before anything else.
    request.local_buffer = True
    with pytest.raises(grpc.RpcError) as both:
        list(sync._summon.ReadSlices(request, timeout=30))
    assert both.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert both.value.details() == ("local_buffer and cuda_buffer are two destinations; "
                                    "ask for one")
    # The daemon is alive and answers the usual read.
    arrays, stats = sync.read_slices_with_stats("m", 5, REQUESTS, local=False)
    for got, want in zip(arrays, expected()):
        np.testing.assert_array_equal(got, want)
    assert not stats.cuda_buffer


def test_a_tensor_read_falls_back_to_the_usual_read(sync: summon.Client) -> None:
    into = torch.full((4096,), 0xAB, dtype=torch.uint8)
    tensors, stats = cuda_slices.read_into(sync, "m", 5, REQUESTS, into, target(4096))
    assert sync.slice_deliveries == {"local_buffer": 1}
    assert stats.local_buffer and not stats.cuda_buffer
    assert [t.dtype for t in tensors] == [torch.float32, torch.float32, torch.bfloat16,
                                          torch.float64]
    for got, want in zip(tensors, expected()):
        if got.dtype == torch.bfloat16:
            got = got.view(torch.int16)
            want = want.view(np.int16)
        np.testing.assert_array_equal(got.numpy(), want)
        assert got.untyped_storage().data_ptr() == into.untyped_storage().data_ptr()
    assert [t.storage_offset() * t.element_size() for t in tensors] == [0, 512, 1280, 1296]
    # This daemon is not asked through CUDA again.
    assert sync._cuda_slices is False
    cuda_slices.read_into(sync, "m", 5, REQUESTS, into, target(4096))
    assert sync.slice_deliveries == {"local_buffer": 2}


def test_a_buffer_too_small_is_refused_not_fallen_back_from(sync: summon.Client) -> None:
    into = torch.zeros(4096, dtype=torch.uint8)
    with pytest.raises(summon.SummonError) as error:
        cuda_slices.read_into(sync, "m", 5, REQUESTS, into, target(1300))
    assert error.value.code == "INVALID_ARGUMENT"
    assert error.value.message == (
        "entry 3 ('embed'): ends at byte 1416 of the CUDA buffer, which has 1300 bytes "
        "(the answer needs 1416: the packed entries)")
    assert not sync.slice_deliveries
    assert (into == 0).all()


def test_read_slices_takes_only_a_cuda_device(sync: summon.Client) -> None:
    with pytest.raises(ValueError, match="takes a CUDA device, not cpu"):
        sync.read_slices("m", 5, REQUESTS, device="cpu")


def test_torchs_ipc_handles() -> None:
    raw = bytes(range(64))
    assert cuda_slices.ipc_handle(raw) == raw
    assert cuda_slices.ipc_handle(b"\x02c" + raw) == raw  # torch <= 2.12
    assert cuda_slices.ipc_handle(b"\x03c" + raw) == raw  # torch 2.13 on
    assert cuda_slices.ipc_handle(b"\x03e" + raw) is None  # expandable segment
    assert cuda_slices.ipc_handle(b"\x03c" + raw[:10]) is None


def test_the_packed_bound() -> None:
    entries = [SliceRequest("a", box((0, 3), (0, 5)), "float32"),   # 60 -> 64
               SliceRequest("b", box((0, 5)), "bfloat16"),          # 10 -> 16
               SliceRequest("c", box((0, 2), (0, 3)))]              # 6 x 8 = 48
    assert cuda_slices.packed_bound(entries) == 64 + 16 + 48
    assert cuda_slices.packed_bound(REQUESTS) >= 1416
