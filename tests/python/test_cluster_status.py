"""`summonctl cluster status` and Client.cluster_status on a real 2-node
cluster (issue 33): the nodes, the leader, the epoch, the ranks each node
holds, the models, and a stopped follower shown as DOWN by the leader, which
answers from its own membership view (nothing forwarded)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import summon
from summon.local import REPO_ROOT, daemon_binary, summonctl_binary
from polling import free_port, wait_until


def summonctl(address: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([summonctl_binary(), "--server", address, *args],
                          capture_output=True, text=True, timeout=60)


class TwoNodes:
    """A real 2-node cluster (2 local ranks each), the leader with the web
    view on a free loopback port."""

    def __init__(self, tmp_path: Path) -> None:
        self.nodes = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        self.port_file = tmp_path / "metrics.port"
        self.daemons = []
        self.log = (tmp_path / "daemons.log").open("ab")
        for rank in (0, 1):
            web = (["--metrics-listen", "127.0.0.1:0", "--metrics-port-file",
                    str(self.port_file)] if rank == 0 else [])
            self.daemons.append(subprocess.Popen(
                [daemon_binary(), "--insecure-local", "--nodes", ",".join(self.nodes),
                 "--coordinator", "static", "--node-rank", str(rank), "--local-ranks", "2",
                 "--data-dir", str(tmp_path / f"n{rank}"),
                 "--checkpoint-root", str(tmp_path / "ckpt"), "--log-level", "warn", *web],
                stdout=self.log, stderr=self.log))
        self.leader = summon.Client(self.nodes[0], timeout=30)

        def formed():
            try:
                return self.leader.cluster_status().ready
            except summon.SummonError:
                return False  # Not listening yet.
        wait_until(formed, "the cluster to form")

    def stop_follower(self) -> None:
        self.daemons[1].terminate()
        self.daemons[1].wait(timeout=30)

    def close(self) -> None:
        self.leader.close()
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.terminate()
                daemon.wait(timeout=30)
        self.log.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TwoNodes]:
    two = TwoNodes(tmp_path)
    try:
        yield two
    finally:
        two.close()


def test_cluster_status_names_the_nodes_and_a_stopped_follower_as_down(
        cluster: TwoNodes) -> None:
    nodes, leader = cluster.nodes, cluster.leader
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
    cluster.stop_follower()

    # The leader first marks the node DOWN, then re-forms; while it does,
    # the detail may say the cluster is forming before it names the node.
    def follower_down():
        status = leader.cluster_status()
        named = status.nodes[1].state == "DOWN" and "node 1" in status.detail
        return status if named else None
    down = wait_until(follower_down, "the leader to name node 1 down")
    assert down.nodes[0].state == "UP" and not down.ready, down

    as_json = summonctl(nodes[0], "-o", "json", "cluster", "status")
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert [(n["node"], n["state"], n["leader"])
            for n in answer["nodes"]] == [
        (0, "NODE_STATE_UP", True), (1, "NODE_STATE_DOWN", False)]
    assert (answer["ready"], answer["answeredBy"], answer["epoch"]) == (False, 0, "0")


def test_the_web_page_shows_the_cluster_and_a_stopped_follower_as_down(
        cluster: TwoNodes, chromium) -> None:
    """The overview's cluster part in headless chromium: leader, epoch,
    readiness, models, and each node UP, then node 1 DOWN once stopped."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    nodes, leader = cluster.nodes, cluster.leader
    leader.create_model("gpt", (REPO_ROOT / "examples/gpt_tiny.json").read_text(),
                        init="seeded:42")
    epoch = leader.cluster_status().epoch
    wait_until(lambda: cluster.port_file.exists() and cluster.port_file.read_text().strip(),
               "the leader's --metrics-port-file")
    base = f"http://127.0.0.1:{cluster.port_file.read_text().strip()}"
    driver = chromium()
    wait = WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException,))

    def rows(table_id: str) -> list[list[str]]:
        # The page redraws every 5 s: a table read mid-redraw is read again.
        for _ in range(10):
            try:
                return [[c.text for c in row.find_elements(By.TAG_NAME, "td")]
                        for row in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tr")[1:]]
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"#{table_id} kept changing")

    driver.get(base + "/")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#nodes td"))
    assert rows("cluster") == [["node 0", str(epoch), "yes", "gpt", "node 0"]]
    assert rows("nodes") == [["0", nodes[0], "UP", "leader", "0–1"],
                             ["1", nodes[1], "UP", "follower", "2–3"]]
    leader.delete_model("gpt", force=True)  # No segment left behind.
    cluster.stop_follower()
    # The page refreshes every 5 s: node 1 turns DOWN, the cluster not ready.
    try:
        wait.until(lambda d: len(rows("nodes")) == 2 and rows("nodes")[1][2] == "DOWN")
    except TimeoutException:
        raise AssertionError("node 1 never shown DOWN; the page: "
                             + driver.find_element(By.TAG_NAME, "body").text) from None
    assert rows("nodes")[0][2:4] == ["UP", "leader"]
    [summary] = rows("cluster")
    assert summary[0] == "node 0" and summary[2].startswith("no: ") and "node 1" in summary[2]
    assert summary[3] == "—"
    wait.until(lambda d: [s.get_attribute("class") for s in
                          d.find_elements(By.CSS_SELECTOR, "#nodes span")] == ["ok", "bad"])
