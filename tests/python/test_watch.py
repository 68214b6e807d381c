"""Watches against a real summond (issue 21): the statistics recorded after an
optimizer step equal numpy's over the seeded values, the histogram's range
comes from the previous record, a NaN written back shows at the right step,
the ring keeps the last K records, and a restart keeps the history."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import summon
from seeded import seeded_float32

SEED = 7
# Two ranks, FULL_SHARD: every parameter is split across both ranks (with
# alignment padding between them), so a record combines two slices.
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.w", "shape": [37, 11], "dtype": "float32"},
                           {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "blk", "params": [{"fqn": "blk.w", "shape": [13, 7], "dtype": "float32"},
                              {"fqn": "blk.b", "shape": [5], "dtype": "float32"}]},
]}
SHAPES = {"embed.w": (37, 11), "blk.w": (13, 7), "blk.b": (5,)}


def values(fqn: str) -> np.ndarray:
    return seeded_float32(fqn, SEED, int(np.prod(SHAPES[fqn]))).astype(np.float64)


def step(client: summon.Client, model: str, n: int) -> None:
    """One training step of both ranks, reported the way summon.torch does."""
    for phase in ("FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER", "IDLE"):
        for rank in (0, 1):
            client.report_phase(model, rank, phase, step=n)


def records(client: summon.Client, model: str, param: str, count: int,
            timeout: float = 10.0, until_step: int = 0) -> list:
    """Waits for the worker to record `count` steps, or step `until_step` (it
    runs off the trainer's path)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = client.show_watch(model, param)
        last = shown.records[-1].step if shown.records else 0
        if (len(shown.records) >= count or (until_step and last >= until_step)
                or time.monotonic() > deadline):
            return list(shown.records)
        time.sleep(0.02)


def watched_step(client: summon.Client, model: str, param: str, n: int) -> None:
    """A step, then its record: a step taken before the worker read the last
    one's shards replaces it (summon_watch_skipped_total, by design)."""
    step(client, model, n)
    assert [r.step for r in records(client, model, param, 10**9, until_step=n)][-1] == n


@pytest.fixture
def model(client: summon.Client) -> str:
    client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
    return "m"


def test_records_equal_numpy_over_the_seeded_values(client: summon.Client,
                                                    model: str) -> None:
    watch = client.add_watch(model, ["embed.*", "blk.w"], histogram_bins=8)
    # A plain dataclass, as every reply of the Python client.
    assert isinstance(watch, summon.Watch)
    assert watch.watched == ("embed.w", "blk.w")  # the alias is stored once
    assert watch.params == ("embed.*", "blk.w")
    assert watch.every == 1 and watch.last_step is None
    step(client, model, 1)
    for fqn in ("embed.w", "blk.w"):
        v = values(fqn)
        [record] = records(client, model, fqn, 1)
        assert record.step == 1 and record.numel == v.size
        assert record.l2_norm == pytest.approx(np.sqrt((v * v).sum()), rel=1e-15)
        assert record.mean == v.sum() / v.size  # sums of 2^-24 multiples are exact
        assert (record.min, record.max) == (v.min(), v.max())
        assert record.abs_max == np.abs(v).max()
        assert (record.nan_count, record.inf_count) == (0, 0)
        # First record: a first pass fixed the range at [min, max].
        counts, _ = np.histogram(v, bins=8, range=(v.min(), v.max()))
        assert record.histogram.counts == tuple(counts.tolist())
        assert (record.histogram.lower, record.histogram.upper) == (v.min(), v.max())
    with pytest.raises(summon.SummonError) as error:
        client.show_watch(model, "blk.b")
    assert error.value.code == "NOT_FOUND"
    [listed] = client.list_watches()
    assert isinstance(listed, summon.Watch)
    assert listed.model == model and listed.last_step == 1 and listed.histogram_bins == 8


def scrape(port_file: Path) -> str:
    port = int(port_file.read_text().strip())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode()


def test_nan_written_back_is_seen_at_its_step(start_daemon, tmp_path: Path) -> None:
    port_file = tmp_path / "metrics.port"
    daemon = start_daemon(local_ranks=2, extra_args=[
        "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(port_file)])
    client = summon.Client(daemon.address)
    model = "m"
    client.create_model(model, LAYOUT, init=f"seeded:{SEED}")
    client.add_watch(model, ["blk.w"], histogram_bins=4)
    watched_step(client, model, "blk.w", 1)
    watched_step(client, model, "blk.w", 2)
    assert len(records(client, model, "blk.w", 2)) == 2
    session = client.open_session(model, params=["blk.w"])
    client.write_tensor(session.id, "blk.w", np.array([np.nan, np.inf], np.float32),
                        offset=89, count=2)
    client.close_session(session.id)
    step(client, model, 3)
    shown_records = records(client, model, "blk.w", 3)
    shown = client.show_watch(model, "blk.w")
    assert isinstance(shown, summon.WatchHistory)
    assert isinstance(shown.records[0], summon.WatchRecord)
    assert (shown.model, shown.param, shown.grad) == (model, "blk.w", False)
    assert shown.first_nonfinite_step == 3
    assert [(r.step, r.nan_count, r.inf_count) for r in shown_records] == [
        (1, 0, 0), (2, 0, 0), (3, 1, 1)]
    v = values("blk.w")[:89]
    third = shown_records[2]
    assert third.l2_norm == pytest.approx(np.sqrt((v * v).sum()), rel=1e-15)
    # The range is the previous record's: the full tensor's min and max.
    full = values("blk.w")
    assert (third.histogram.lower, third.histogram.upper) == (full.min(), full.max())
    counts, _ = np.histogram(v, bins=4, range=(full.min(), full.max()))
    assert third.histogram.counts == tuple(counts.tolist())
    assert client.show_watch(model, "blk.w", since=3).records[0].step == 3
    # Counted once, when first seen; the norm gauge covers watched params only.
    step(client, model, 4)
    records(client, model, "blk.w", 4)
    metrics = scrape(port_file)
    assert 'summon_watch_nonfinite_total{model="m",param="blk.w"} 1' in metrics
    assert 'summon_watch_l2_norm{model="m",param="blk.w"}' in metrics
    assert 'param="embed.w"' not in metrics
    client.close()


def test_every_n_steps_and_the_ring_bound(start_daemon) -> None:
    daemon = start_daemon(local_ranks=2, unix_socket=True,
                          extra_args=["--watch-history", "3"])
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        watch = client.add_watch("m", ["blk.b"], every=2, histogram_bins=0)
        assert watch.history == 3
        for n in range(1, 11):
            if n % 2:
                step(client, "m", n)
            else:
                watched_step(client, "m", "blk.b", n)
        kept = records(client, "m", "blk.b", 3)
        time.sleep(0.2)  # nothing beyond the bound arrives late
        kept = list(client.show_watch("m", "blk.b").records)
        assert [r.step for r in kept] == [6, 8, 10]
        assert kept[0].histogram is None
        assert client.show_watch("m", "blk.b").first_nonfinite_step is None
        # A restart keeps the history and the watch goes on.
        daemon.restart()
        assert [w.model for w in client.list_watches()] == ["m"]
        assert [r.step for r in client.show_watch("m", "blk.b").records] == [6, 8, 10]
        step(client, "m", 12)
        assert [r.step for r in records(client, "m", "blk.b", 4)][-3:] == [8, 10, 12]
        client.remove_watch("m")
        assert client.list_watches() == []
        # A deleted model's watch goes with it.
        client.add_watch("m", ["blk.b"])
        client.delete_model("m")
        assert client.list_watches() == []
        with pytest.raises(summon.SummonError) as error:
            client.remove_watch("m")
        assert error.value.code == "NOT_FOUND"


def test_bad_watches_are_refused(client: summon.Client, model: str) -> None:
    for kwargs, code in [({"params": ["nope.*"]}, "INVALID_ARGUMENT"),
                         ({"histogram_bins": 5000}, "INVALID_ARGUMENT"),
                         ({"every": -1}, "INVALID_ARGUMENT"),
                         ({"grads": True}, "INVALID_ARGUMENT")]:
        with pytest.raises(summon.SummonError) as error:
            client.add_watch(model, **kwargs)
        assert error.value.code == code, kwargs
    with pytest.raises(summon.SummonError) as error:
        client.add_watch("absent")
    assert error.value.code == "NOT_FOUND"
