"""`summonctl cluster status` and Client.cluster_status on a real 2-node
cluster (issue 33): the nodes, the leader, the epoch, the ranks each node
holds, the models, and a stopped follower shown as DOWN by the leader, which
answers from its own membership view (nothing forwarded)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import summon
from summon.local import REPO_ROOT, daemon_binary, summonctl_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summonctl(address: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([summonctl_binary(), "--server", address, *args],
                          capture_output=True, text=True, timeout=60)


def wait_until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_cluster_status_names_the_nodes_and_a_stopped_follower_as_down(
        tmp_path: Path) -> None:
    nodes = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    daemons = []
    log = (tmp_path / "daemons.log").open("ab")
    for rank in (0, 1):
        daemons.append(subprocess.Popen(
            [daemon_binary(), "--insecure-local", "--nodes", ",".join(nodes),
             "--node-rank", str(rank), "--local-ranks", "2",
             "--data-dir", str(tmp_path / f"n{rank}"),
             "--checkpoint-root", str(tmp_path / "ckpt"), "--log-level", "warn"],
            stdout=log, stderr=log))
    leader = summon.Client(nodes[0], timeout=30)
    try:
        def formed():
            try:
                return leader.cluster_status().ready
            except summon.SummonError:
                return False  # Not listening yet.
        wait_until(formed, "the cluster to form")
        leader.create_model("gpt", (REPO_ROOT / "examples/gpt_tiny.json").read_text(),
                            init="seeded:42")

        status = leader.cluster_status()
        assert status.epoch > 0
        assert (status.answered_by, status.leader, status.ready, status.detail,
                status.models) == (0, 0, True, "", ("gpt",))
        assert status.nodes == (
            summon.ClusterNode(0, nodes[0], "UP", True, (0, 1)),
            summon.ClusterNode(1, nodes[1], "UP", False, (2, 3)))
        # A follower answers too, from its own view.
        follower = summon.Client(nodes[1], timeout=30)
        seen = follower.cluster_status()
        follower.close()
        assert (seen.answered_by, seen.leader, seen.epoch, seen.ready) == (
            1, 0, status.epoch, True)
        assert [n.state for n in seen.nodes] == ["UP", "UP"]

        table = summonctl(nodes[0], "cluster", "status")
        assert table.returncode == 0, table.stderr
        lines = [" ".join(line.split()) for line in table.stdout.splitlines()]
        assert lines == [
            "answered_by 0", "leader 0", f"epoch {status.epoch}", "ready true",
            "models gpt", "",
            "NODE ADDRESS STATE LEADER RANKS",
            f"0 {nodes[0]} UP yes 0-1",
            f"1 {nodes[1]} UP no 2-3"]

        leader.delete_model("gpt", force=True)  # No segment left behind.
        daemons[1].terminate()
        daemons[1].wait(timeout=30)

        def follower_down():
            status = leader.cluster_status()
            return status if status.nodes[1].state == "DOWN" else None
        down = wait_until(follower_down, "the leader to see node 1 down")
        assert down.nodes[0].state == "UP"
        assert not down.ready and "node 1" in down.detail, down.detail

        as_json = summonctl(nodes[0], "-o", "json", "cluster", "status")
        assert as_json.returncode == 0, as_json.stderr
        answer = json.loads(as_json.stdout)
        assert [(n["node"], n["state"], n["leader"])
                for n in answer["nodes"]] == [
            (0, "NODE_STATE_UP", True), (1, "NODE_STATE_DOWN", False)]
        assert (answer["ready"], answer["answeredBy"], answer["epoch"]) == (False, 0, "0")
    finally:
        leader.close()
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.terminate()
                daemon.wait(timeout=30)
        log.close()
