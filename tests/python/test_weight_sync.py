"""Weight sync against a real summond (docs/api.md#weight-sync): published
versions are immutable, slices come back exactly (seeded init: every
element's value is known), bad entries are refused naming the entry, and
old versions are released beyond --max-versions."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import summon
from summon import SliceRequest, dtypes
from seeded import seeded_float32

SEED = 11
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed", "shape": [37, 8], "dtype": "float32"}]},
    {"fqn": "l0", "params": [{"fqn": "l0.qkv", "shape": [24, 16], "dtype": "float32"},
                             {"fqn": "l0.o", "shape": [16, 24], "dtype": "float32"},
                             {"fqn": "l0.norm", "shape": [16], "dtype": "float32"}]},
]}
SHAPES = {"embed": (37, 8), "l0.qkv": (24, 16), "l0.o": (16, 24), "l0.norm": (16,)}


def seeded(fqn: str) -> np.ndarray:
    shape = SHAPES[fqn]
    return seeded_float32(fqn, SEED, int(np.prod(shape))).reshape(shape)


@pytest.fixture
def sync(start_daemon) -> summon.Client:
    daemon = start_daemon(local_ranks=2, extra_args=["--max-versions", "2"])
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        yield client


def box(*ranges: tuple[int, int]) -> list[tuple[int, int]]:
    return list(ranges)


def test_slices_are_exact_rows_columns_and_dtypes(sync: summon.Client) -> None:
    assert sync.publish("m", 5) == 5
    arrays, stats = sync.read_slices_with_stats("m", 5, [
        SliceRequest("l0.qkv", box((8, 8), (0, 16))),           # rows
        SliceRequest("l0.o", box((0, 16), (12, 12))),           # columns
        SliceRequest("l0.norm", box((0, 16)), "bfloat16"),
        SliceRequest("embed", box((3, 5), (1, 3)), "float64"),
    ])
    np.testing.assert_array_equal(arrays[0], seeded("l0.qkv")[8:16])
    np.testing.assert_array_equal(arrays[1], seeded("l0.o")[:, 12:24])
    np.testing.assert_array_equal(arrays[2], dtypes.float32_to_bfloat16(seeded("l0.norm")))
    np.testing.assert_array_equal(arrays[3], seeded("embed")[3:8, 1:4].astype(np.float64))
    assert arrays[2].dtype == np.uint16 and arrays[3].dtype == np.float64
    # Packed 16-byte aligned, one buffer.
    base = arrays[0].__array_interface__["data"][0]
    for array in arrays:
        assert (array.__array_interface__["data"][0] - base) % 16 == 0
    assert stats.slice_bytes == 8 * 16 * 4 + 16 * 12 * 4 + 16 * 2 + 15 * 8
    assert stats.peer_bytes == 0  # One node: nothing crosses between nodes.


def test_a_version_never_changes_after_publish(sync: summon.Client) -> None:
    sync.publish("m", 1)
    with sync.summon_full_params("m", scope="l0") as params:
        params["l0.qkv"] = np.full((24, 16), 3.5, np.float32)
    sync.publish("m", 2)
    request = [SliceRequest("l0.qkv", box((0, 24), (0, 16)))]
    np.testing.assert_array_equal(sync.read_slices("m", 1, request)[0], seeded("l0.qkv"))
    np.testing.assert_array_equal(sync.read_slices("m", 2, request)[0],
                                  np.full((24, 16), 3.5, np.float32))


def test_old_versions_are_released_and_unknown_ones_named(sync: summon.Client) -> None:
    for step in (1, 2, 3):
        sync.publish("m", step)
    request = [SliceRequest("l0.norm", box((0, 16)))]
    with pytest.raises(summon.SummonError) as released:
        sync.read_slices("m", 1, request)
    assert released.value.code == "FAILED_PRECONDITION"
    assert "version 1 of model 'm' was released" in released.value.message
    assert "kept: 2, 3" in released.value.message
    with pytest.raises(summon.SummonError) as never:
        sync.read_slices("m", 7, request)
    assert never.value.code == "NOT_FOUND"
    assert "version 7 of model 'm' was never published" in never.value.message
    with pytest.raises(summon.SummonError) as again:
        sync.publish("m", 3)
    assert again.value.code == "FAILED_PRECONDITION"


@pytest.mark.parametrize("entry,code,text", [
    (SliceRequest("l0.o", box((0, 16), (20, 5))), "OUT_OF_RANGE",
     "entry 1 ('l0.o'): box [20, 20 + 5) of dimension 1 lies outside"),
    (SliceRequest("l0.nope", box((0, 1))), "NOT_FOUND", "entry 1 ('l0.nope')"),
    (SliceRequest("l0.o", box((0, 16))), "OUT_OF_RANGE",
     "entry 1 ('l0.o'): box has 1 dimensions; 'l0.o' has 2"),
    (SliceRequest("l0.o", box((0, 16), (0, 24)), "float16"), "INVALID_ARGUMENT",
     "entry 1 ('l0.o'): dtype float16 loses the range of the stored float32"),
])
def test_bad_entries_are_refused_naming_them(sync: summon.Client, entry: SliceRequest,
                                             code: str, text: str) -> None:
    sync.publish("m", 1)
    with pytest.raises(summon.SummonError) as error:
        sync.read_slices("m", 1, [SliceRequest("l0.norm", box((0, 16))), entry])
    assert error.value.code == code
    assert text in error.value.message, error.value.message


def test_wait_version_blocks_until_a_publish(sync: summon.Client) -> None:
    sync.publish("m", 1)  # Older than asked: still waits.
    with pytest.raises(summon.SummonError) as late:
        sync.wait_version("m", 2, timeout=0.3)
    assert late.value.code == "DEADLINE_EXCEEDED"
    timer = threading.Timer(0.5, lambda: sync.publish("m", 4))
    started = time.monotonic()
    timer.start()
    try:
        assert sync.wait_version("m", 3, timeout=20) == 4
    finally:
        timer.join()
    assert time.monotonic() - started >= 0.4
    assert sync.wait_version("m", 2, timeout=1) == 4  # At once.


def test_an_answer_over_max_read_bytes_is_refused_naming_the_entry(start_daemon) -> None:
    daemon = start_daemon(local_ranks=2, extra_args=["--max-read-bytes", "1000"])
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        client.publish("m", 1)
        # 8 x 16 floats = 512 bytes, then 512 more from offset 512: 1024 > 1000.
        rows = SliceRequest("l0.qkv", box((0, 8), (0, 16)))
        assert len(client.read_slices("m", 1, [rows])) == 1
        with pytest.raises(summon.SummonError) as error:
            client.read_slices("m", 1, [rows, rows])
        assert error.value.code == "RESOURCE_EXHAUSTED"
        assert "entry 1 ('l0.qkv'): the answer would pass 1000 bytes" in error.value.message


def test_a_deleted_models_versions_go_with_it(sync: summon.Client) -> None:
    sync.publish("m", 1)
    sync.delete_model("m")
    with pytest.raises(summon.SummonError) as gone:
        sync.read_slices("m", 1, [SliceRequest("l0.norm", box((0, 16)))])
    assert gone.value.code == "NOT_FOUND"
    # A model of the same name starts its versions afresh.
    sync.create_model("m", LAYOUT, init=f"seeded:{SEED}")
    assert sync.publish("m", 1) == 1
    np.testing.assert_array_equal(
        sync.read_slices("m", 1, [SliceRequest("l0.norm", box((0, 16)))])[0], seeded("l0.norm"))


def _to_optimizer(client: summon.Client, step: int) -> None:
    for rank in (0, 1):
        for phase in ("FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER"):
            client.report_phase("m", rank, phase, step)


def test_the_last_rank_ending_a_step_publishes_it(sync: summon.Client) -> None:
    """serve(publish_every=N)'s path: each rank's end-of-step report asks
    (publish_step); the version appears when the last one arrives."""
    _to_optimizer(sync, 1)
    first = sync.report_phase("m", 0, "IDLE", publish_step=1)
    assert (first.phase, first.published, first.publish_error) == ("IDLE", None, "")
    with pytest.raises(summon.SummonError) as none:
        sync.wait_version("m", 1, timeout=0.3)
    assert none.value.code == "DEADLINE_EXCEEDED"
    last = sync.report_phase("m", 1, "IDLE", publish_step=1)
    assert (last.phase, last.published, last.publish_error) == ("IDLE", 1, "")
    assert sync.wait_version("m", 1, timeout=1) == 1
    np.testing.assert_array_equal(
        sync.read_slices("m", 1, [SliceRequest("l0.o", box((0, 16), (0, 24)))])[0],
        seeded("l0.o"))

    # Ranks asking for different steps: nothing published, the last says why.
    _to_optimizer(sync, 2)
    assert sync.report_phase("m", 0, "IDLE", publish_step=2).published is None
    last = sync.report_phase("m", 1, "IDLE", publish_step=3)
    assert (last.phase, last.published, last.publish_error_code) == (
        "IDLE", None, "FAILED_PRECONDITION")
    assert last.publish_error == ("not publishing at the end of this step of model 'm': "
                                  "rank 0 asked for version 2 and rank 1 for version 3")
    # A step not above the newest version: the publish's own refusal.
    _to_optimizer(sync, 3)
    sync.report_phase("m", 0, "IDLE", publish_step=1)
    last = sync.report_phase("m", 1, "IDLE", publish_step=1)
    assert (last.published, last.publish_error) == (
        None, "version 1 of model 'm' is not above the newest published, 1")
    assert sync.wait_version("m", 1, timeout=1) == 1
    # Only with the move that ends a step, refused before anything moves.
    with pytest.raises(summon.SummonError) as wrong:
        sync.report_phase("m", 0, "FORWARD", 4, publish_step=4)
    assert wrong.value.code == "INVALID_ARGUMENT"
    assert sync.describe_model("m").ranks[0].phase == "IDLE"
