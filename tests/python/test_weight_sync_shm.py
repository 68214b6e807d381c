"""ReadSlices into a same-host shared-memory buffer (docs/api.md#weight-sync),
and Publish all or nothing across nodes, against real summond processes.

- On the daemon's host the answer lands in the caller's memfd (no data
  messages), exactly as the stream would carry it; summon.sync.pull uses it
  without being asked.
- A buffer too small is refused naming the entry, with not a byte of it
  written; a read that fails midway leaves the header "being written".
- A Publish that fails on one node is rolled back on the nodes that took it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

import summon
import summon.sync
from polling import free_port, wait_until
from seeded import _fnv1a64
from summon import SliceBuffer, SliceRequest, dtypes
from summon.local import daemon_binary
from test_weight_sync import LAYOUT, SEED, box, seeded

REQUESTS = [
    SliceRequest("l0.qkv", box((8, 8), (0, 16))),   # rows
    SliceRequest("l0.o", box((0, 16), (12, 12))),   # columns
    SliceRequest("l0.norm", box((0, 5)), "bfloat16"),  # 10 bytes, then a 6-byte gap
    SliceRequest("embed", box((3, 5), (1, 3)), "float64"),
]


def expected() -> list[np.ndarray]:
    return [seeded("l0.qkv")[8:16], seeded("l0.o")[:, 12:24],
            dtypes.float32_to_bfloat16(seeded("l0.norm")[:5]),
            seeded("embed")[3:8, 1:4].astype(np.float64)]


@pytest.fixture
def sync(start_daemon) -> summon.Client:
    daemon = start_daemon(local_ranks=2, extra_args=["--max-versions", "2"])
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        client.publish("m", 5)
        yield client


def test_the_answer_lands_in_the_callers_buffer(sync: summon.Client) -> None:
    with SliceBuffer(4096) as buffer:
        arrays, stats = sync.read_slices_with_stats("m", 5, REQUESTS, into=buffer)
        assert stats.local_buffer
        assert sync.slice_deliveries == {"local_buffer": 1}
        for got, want in zip(arrays, expected()):
            np.testing.assert_array_equal(got, want)
        # Views into the buffer, after its 64-byte header, 16-byte aligned.
        base = buffer.array().__array_interface__["data"][0]
        for array in arrays:
            at = array.__array_interface__["data"][0] - base
            assert at >= 64 and (at - 64) % 16 == 0 and at < buffer.size
        header = buffer.header()
        assert header.magic == b"SUMSLICE" and header.complete
        assert (header.version, header.entries) == (5, 4)
        assert header.total_bytes == 512 + 768 + 16 + 120
        # The same bytes as the stream, gaps zero.
        streamed, _ = sync.read_slices_with_stats("m", 5, REQUESTS, local=False)
        packed = buffer.array()[64:64 + header.total_bytes]
        assert packed[512 + 768 + 10:512 + 768 + 16].tolist() == [0] * 6
        for got, want in zip(arrays, streamed):
            np.testing.assert_array_equal(got, want)
        assert sync.slice_deliveries == {"local_buffer": 1, "stream": 1}
    # Without `into`, a fresh buffer per read, still through shared memory.
    for got, want in zip(sync.read_slices("m", 5, REQUESTS), expected()):
        np.testing.assert_array_equal(got, want)
    assert sync.slice_deliveries["local_buffer"] == 2


def test_a_buffer_too_small_is_refused_naming_the_entry_untouched(
        sync: summon.Client) -> None:
    with SliceBuffer(1300) as buffer:  # Entry 3 ends at 1416 of the answer.
        buffer.array()[:] = 0xAB
        with pytest.raises(summon.SummonError) as error:
            sync.read_slices("m", 5, REQUESTS, into=buffer)
        assert error.value.code == "INVALID_ARGUMENT"
        assert error.value.message == (
            "entry 3 ('embed'): ends at byte 1480 of the slice buffer, which has 1364 "
            "bytes (the answer needs 1480: a 64-byte header and the packed entries)")
        assert (buffer.array() == 0xAB).all()  # Not one byte written.


def test_a_buffer_not_sealed_against_shrinking_is_refused(sync: summon.Client) -> None:
    fd = os.memfd_create("summon-test-unsealed", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 1 << 16)
        with SliceBuffer(1 << 16) as buffer:
            os.close(buffer._fd)
            buffer._fd = os.dup(fd)  # The daemon gets the unsealed one.
            with pytest.raises(summon.SummonError) as error:
                sync.read_slices("m", 5, REQUESTS, into=buffer)
        assert error.value.code == "INVALID_ARGUMENT"
        assert "sealed against shrinking" in error.value.message
    finally:
        os.close(fd)


def test_pull_reads_through_shared_memory_on_the_daemons_host(sync: summon.Client) -> None:
    from summon.sync.plan import Entry, Piece, SyncPlan
    plan = SyncPlan(tp_size=1, sources={"l0.qkv": (24, 16), "l0.o": (16, 24)}, ranks=[[
        Entry("qkv", [Piece("l0.qkv", ((0, 24), (0, 16)))], (24, 16), "float32"),
        Entry("o", [Piece("l0.o", ((0, 16), (0, 24)))], (16, 24), "float32")]])
    pulled = dict(summon.sync.pull(sync, "m", 5, plan, 0, max_batch_bytes=2048))
    np.testing.assert_array_equal(pulled["qkv"].numpy(), seeded("l0.qkv"))
    np.testing.assert_array_equal(pulled["o"].numpy(), seeded("l0.o"))
    assert sync.slice_deliveries == {"local_buffer": 2}  # One read per batch.


class Cluster:
    """Real summond nodes of 1 rank each on free loopback ports; node
    `faulty` arms the fault point `fault` (it kills itself there)."""

    def __init__(self, tmp_path: Path, nodes: int, faulty: int = -1, fault: str = "",
                 extra: tuple[str, ...] = ()) -> None:
        self.nodes = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]
        self.data_dirs = [tmp_path / f"n{rank}" for rank in range(nodes)]
        self.log = (tmp_path / "daemons.log").open("ab")
        self.daemons = []
        for rank in range(nodes):
            env = dict(os.environ)
            if rank == faulty:
                env["SUMMON_FAULT_POINT"] = fault
            self.daemons.append(subprocess.Popen(
                [daemon_binary(), "--insecure-local", "--nodes", ",".join(self.nodes),
                 "--node-rank", str(rank), "--local-ranks", "1", "--coordinator", "static",
                 "--data-dir", str(self.data_dirs[rank]), "--log-level", "warn", *extra],
                stdout=self.log, stderr=self.log, env=env))
        self.clients = [summon.Client(node, timeout=30) for node in self.nodes]

        def formed():
            try:
                return self.clients[0].cluster_status().ready
            except summon.SummonError:
                return False
        wait_until(formed, "the cluster to form")

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=30)
        self.log.close()
        # Shards outlive their daemon (a restart finds them): with a node
        # killed the models cannot be deleted, so their segments go here,
        # by each daemon's instance name (summond's InstanceForDataDir).
        for data_dir in self.data_dirs:
            instance = f"{_fnv1a64(os.path.realpath(data_dir)) & 0xFFFFFFFFFFFF:012x}"
            for name in os.listdir("/dev/shm"):
                if name.startswith(f"summon-{instance}-"):
                    os.unlink(f"/dev/shm/{name}")


def create(client: summon.Client) -> None:
    wait_until(lambda: _try_create(client), "the model to be created")


def _try_create(client: summon.Client) -> bool:
    try:
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        return True
    except summon.SummonError as error:
        if error.code != "UNAVAILABLE":
            raise
        return False


def test_other_nodes_pieces_fetched_in_many_concurrent_batches_land_exactly(
        tmp_path: Path) -> None:
    # Batches of 16 bytes, 3 in flight: every remote piece below is cut
    # into several fetches, which overlap each other and the local copies.
    cluster = Cluster(tmp_path, 2, extra=("--slice-fetch-bytes", "16",
                                          "--slice-fetches-in-flight", "3"))
    try:
        create(cluster.clients[0])
        cluster.clients[0].publish("m", 1)
        reader = cluster.clients[1]  # Rank 1: rank 0's elements are remote.
        # Remote: l0.qkv's rows 8-15 (128 float32, all on rank 0) and
        # embed's rows 3-7 (15 elements, float64 converted on node 0); l0.o's
        # columns 12-23 and l0.norm lie on rank 1.
        with SliceBuffer(4096) as buffer:
            for into, delivery in ((buffer, "local_buffer"), (None, "stream")):
                arrays, stats = reader.read_slices_with_stats(
                    "m", 1, REQUESTS, into=into, local=into is not None)
                assert stats.local_buffer == (delivery == "local_buffer")
                assert stats.peer_bytes == 128 * 4 + 15 * 8, stats
                for got, want in zip(arrays, expected()):
                    np.testing.assert_array_equal(got, want)
        assert reader.slice_deliveries == {"local_buffer": 1, "stream": 1}
    finally:
        cluster.close()


def test_a_read_failing_midway_leaves_the_header_incomplete(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2)
    try:
        create(cluster.clients[0])
        cluster.clients[0].publish("m", 1)
        reader = cluster.clients[0]
        # Unit l0 is flat (FSDP1): 784 elements, 392 per rank. l0.qkv (384)
        # lies on rank 0 (node 0), l0.o's rows from 1 on on rank 1 (node 1).
        requests = [SliceRequest("l0.qkv", box((0, 12), (0, 16))),
                    SliceRequest("l0.o", box((1, 15), (0, 24)))]
        with SliceBuffer(4096) as buffer:
            reader.read_slices("m", 1, requests, into=buffer)
            assert buffer.header().complete
            buffer.array()[64:] = 0
            cluster.daemons[1].kill()
            cluster.daemons[1].wait()
            with pytest.raises(summon.SummonError) as error:
                reader.read_slices("m", 1, requests, into=buffer)
            assert error.value.message.startswith("entry 1: node 1: "), error.value.message
            # Entry 0 was written, then entry 1 failed: the header no longer
            # vouches for the bytes.
            header = buffer.header()
            assert header.magic == b"SUMSLICE" and not header.complete
            np.testing.assert_array_equal(
                buffer.array()[64:64 + 768].view(np.float32).reshape(12, 16),
                seeded("l0.qkv")[:12])
    finally:
        cluster.close()


def test_a_publish_failing_on_one_node_is_rolled_back_on_the_others(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, faulty=2, fault="publish.node_take")
    try:
        create(cluster.clients[0])
        with pytest.raises(summon.SummonError) as error:
            cluster.clients[0].publish("m", 4)
        message = error.value.message
        assert "publish of version 4 of model 'm' failed: node 2:" in message, message
        assert "rolled back on nodes [0, 1]" in message, message
        # Neither the leader nor node 1 keeps version 4 ...
        for client in cluster.clients[:2]:
            with pytest.raises(summon.SummonError) as waited:
                client.wait_version("m", 4, timeout=0.5)
            assert waited.value.code == "DEADLINE_EXCEEDED"
        # ... and a reader asking for it is told why.
        with pytest.raises(summon.SummonError) as read:
            cluster.clients[1].read_slices("m", 4, [SliceRequest("l0.norm", box((0, 16)))])
        assert "version 4 of model 'm' was rolled back: its publish failed (node 2:" in \
            read.value.message, read.value.message
    finally:
        cluster.close()
