"""The Python client through a leader election (issue 31): two real summond
on a real etcd (Debian's /usr/bin/etcd, one member on free ports); the
leader is paused (SIGSTOP) past its 5 s lease and woken 8 s later, and
the calls that are safe to repeat (a model's description, the open of a
read-only session, session listings), sent through the follower while the
cluster answers UNAVAILABLE "electing a leader", are sent again until the
new leader answers them within the caller's timeout. A writable open is
not repeated: it reports the election."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import summon
from summon.local import daemon_binary
from polling import free_port, wait_until

ETCD = "/usr/bin/etcd"
# Replicated on both nodes: the survivor serves it alone once it leads (a
# FULL_SHARD model would answer UNAVAILABLE naming the paused node).
LAYOUT = {"strategy": "NO_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.w", "shape": [8, 4], "dtype": "float32"}]}]}

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="needs Debian's etcd-server")


class EtcdPair:
    """One etcd member and two summond on it, every port free, every dir temporary."""

    def __init__(self, tmp_path: Path) -> None:
        self.etcd_dir = tempfile.mkdtemp(prefix="summon-etcd-")
        client, peer = free_port(), free_port()
        self.log = (tmp_path / "processes.log").open("ab")
        self.etcd = subprocess.Popen(
            [ETCD, "--name", "m1", "--data-dir", self.etcd_dir,
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"m1=http://127.0.0.1:{peer}",
             "--initial-cluster-state", "new", "--logger", "zap", "--log-level", "warn"],
            stdout=self.log, stderr=self.log)
        self.nodes = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        self.daemons = [subprocess.Popen(
            [daemon_binary(), "--insecure-local", "--nodes", ",".join(self.nodes),
             "--node-rank", str(rank), "--local-ranks", "1",
             "--data-dir", str(tmp_path / f"n{rank}"),
             "--coordinator", f"etcd://127.0.0.1:{client}/pyretry",
             "--coordinator-lease-ttl", "5s", "--log-level", "warn"],
            stdout=self.log, stderr=self.log) for rank in (0, 1)]
        self.clients = [summon.Client(node, timeout=60) for node in self.nodes]

        def formed():
            try:
                status = self.clients[0].cluster_status()
                return status if status.ready else None
            except summon.SummonError:
                return None  # Not listening yet, or still electing.
        self.leader = wait_until(formed, "the cluster to form", timeout=60.0).leader

    def close(self) -> None:
        # Models' shared-memory segments outlive a daemon with a data dir.
        for model in ("m",):
            try:
                self.clients[0].delete_model(model, force=True)
            except summon.SummonError:
                pass
        for client in self.clients:
            client.close()
        for process in [*self.daemons, self.etcd]:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
                process.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.etcd_dir, ignore_errors=True)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[EtcdPair]:
    cluster = EtcdPair(tmp_path)
    try:
        yield cluster
    finally:
        cluster.close()


def test_safe_calls_wait_out_an_election_within_their_timeout(pair: EtcdPair) -> None:
    leader = pair.leader
    follower = 1 - leader
    client = pair.clients[follower]
    client.create_model("m", LAYOUT, init="seeded:7")
    paused = pair.daemons[leader]
    paused.send_signal(signal.SIGSTOP)
    woken = threading.Timer(8.0, paused.send_signal, args=(signal.SIGCONT,))
    woken.start()
    try:
        # The follower notices within its failure timeout (3 s) and answers
        # "electing a leader" until the paused leader's 5 s lease expires and
        # it leads, on its own (the survivors keep serving).
        def electing():
            try:
                client._call(client._summon.DescribeModel,
                             summon.client.summon_pb2.DescribeModelRequest(model="m"))
                return False
            except summon.SummonError as error:
                return "electing a leader" in str(error)
        wait_until(electing, "the follower to answer 'electing a leader'", timeout=10)
        with pytest.raises(summon.SummonError, match="UNAVAILABLE.*electing a leader"):
            client.open_session("m")  # writable: reported, not repeated
        started = time.monotonic()
        model = client.describe_model("m")
        assert model.name == "m"
        session = client.open_session("m", writeback=False)
        assert [s.id for s in client.list_sessions("m")] == [session.id]
        waited = time.monotonic() - started
        assert 0 < waited < 60
    finally:
        woken.cancel()
        paused.send_signal(signal.SIGCONT)
    status = client.cluster_status()
    assert status.ready
    assert status.leader == follower
    client.close_session(session.id)
