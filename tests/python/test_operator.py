"""An operator's first day (issue 33) against real summond processes: the
web view with --insecure-local shows every session and who holds it (JSON
and in headless chromium: holders, watches, watched parameters, axes, an
error state that ends), session leases are never 0, a model whose segments
vanished refuses its trainer with the way out instead of a raw
FileNotFoundError, the operator's listing of every session, and a "did you
mean" for a mistyped model name."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch

import summon
import summon.torch as st
from summon.local import LocalDaemon

try:  # Only the browser test needs selenium (client/python/requirements.txt).
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None

MODEL = "net"
PARAM = "0.weight"


def tiny() -> torch.nn.Module:
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def web(tmp_path: Path, start_daemon: Callable[..., LocalDaemon]) -> Iterator[dict]:
    port_file = tmp_path / "metrics.port"
    daemon = start_daemon(local_ranks=2, extra_args=[
        "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(port_file)])
    deadline = time.monotonic() + 10
    while not port_file.exists() or not port_file.read_text().strip():
        assert time.monotonic() < deadline, "no --metrics-port-file"
        time.sleep(0.02)
    with summon.Client(daemon.address, timeout=30, principal="alice") as alice:
        net = tiny()
        st.register(alice, MODEL, net, [net[0], net[1]])
        yield {"base": f"http://127.0.0.1:{port_file.read_text().strip()}",
               "alice": alice, "address": daemon.address}


def test_insecure_local_page_lists_every_session_and_its_holder(web: dict) -> None:
    """docs/api.md: with --insecure-local anyone on the loopback listener
    sees everything; the page's own principal owns no session, yet it lists
    alice's and bob's, each with its holder."""
    base, alice = web["base"], web["alice"]
    with summon.Client(web["address"], timeout=30, principal="bob") as bob:
        mine = alice.open_session(MODEL, scope="0", writeback=False)
        theirs = bob.open_session(MODEL, scope="1", writeback=False)
        try:
            status, body = get(base + "/api/sessions")
            assert status == 200, body
            listed = [(s["id"], s["owner"], s["model"])
                      for s in json.loads(body)["sessions"]]
            assert listed == [(mine.id, "alice", MODEL), (theirs.id, "bob", MODEL)]
            # The RPC behind it: every session for an operator, one's own
            # otherwise (R12).
            assert [s.id for s in alice.list_sessions()] == [mine.id]
            assert [(s.id, s.owner) for s in alice.list_sessions(all=True)] == [
                (mine.id, "alice"), (theirs.id, "bob")]
        finally:
            alice.close_session(mine.id)
            bob.close_session(theirs.id)


def test_a_lease_of_zero_is_refused(client: summon.Client) -> None:
    """docs/api.md: a lease must be in (0, 24h]; 0 is not taken for the
    default, on open as on renew."""
    net = tiny()
    st.register(client, MODEL, net, [net[0], net[1]])
    with pytest.raises(summon.SummonError) as zero:
        client.open_session(MODEL, scope="0", writeback=False, lease_seconds=0)
    assert zero.value.code == "INVALID_ARGUMENT"
    assert zero.value.message == (
        "lease must be in (0, 24h] (--lease SECONDS, lease_seconds), got 0")
    assert client.list_sessions() == []
    opened = client.open_session(MODEL, scope="0", writeback=False, lease_seconds=7)
    assert opened.options.lease_seconds == 7
    client.close_session(opened.id)


def test_a_mistyped_model_name_gets_a_suggestion(client: summon.Client) -> None:
    net = tiny()
    st.register(client, MODEL, net, [net[0], net[1]])
    with pytest.raises(summon.SummonError) as mistyped:
        client.describe_model("nte")
    assert (mistyped.value.code, mistyped.value.message) == (
        "NOT_FOUND", "no model named 'nte' (did you mean 'net'?)")
    with pytest.raises(summon.SummonError) as unknown:
        client.open_session("gpt-j", scope="0")
    assert unknown.value.message == "no model named 'gpt-j'"


def test_vanished_segments_refuse_the_trainer_with_the_way_out(
        client: summon.Client) -> None:
    """Someone removed the model's segments from /dev/shm: the daemon (which
    still maps them) says DEGRADED, and a trainer attaching gets
    FAILED_PRECONDITION naming the recovery, not FileNotFoundError."""
    net = tiny()
    st.register(client, MODEL, net, [net[0], net[1]])
    shard_map = client.map_shards(MODEL, 0)
    os.unlink("/dev/shm" + shard_map.segment_name)
    assert client.describe_model(MODEL).state == "DEGRADED"
    with st.attach(client, MODEL, [0, 1], lease_seconds=5) as trainer:
        with pytest.raises(summon.SummonError) as refused:
            trainer.shard_views(0)  # What serve() does first on each rank.
    assert refused.value.code == "FAILED_PRECONDITION"
    message = refused.value.message
    assert message.startswith(f"model '{MODEL}' is DEGRADED, so its shards are not "
                              f"handed out: segment {shard_map.segment_name} was "
                              "unlinked from /dev/shm")
    assert message.endswith(
        f"Recover: `summonctl model save {MODEL} --to CKPT` now, `summonctl model "
        f"delete {MODEL} --force`, restart the trainer (it creates the model again), "
        f"then `summonctl model load {MODEL} --from CKPT`")
    client.delete_model(MODEL, force=True)


@pytest.fixture
def browser(chromium) -> object:
    if webdriver is None:
        pytest.skip("no selenium: scripts/setup (client/python/requirements.txt)")
    return chromium()


def test_operator_pages_in_a_real_browser(web: dict, browser) -> None:
    base, alice, driver = web["base"], web["alice"], browser
    wait = WebDriverWait(driver, 20)
    alice.add_watch(MODEL, [PARAM], histogram_bins=8)
    session = alice.open_session(MODEL, scope="1", writeback=False)
    try:
        # The overview: alice's session with its holder and lease, the watch.
        driver.get(base + "/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions td"))
        cells = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#sessions td")]
        assert cells[:3] == [session.id, MODEL, "alice"]
        assert cells[7].endswith(" s") and 0 < int(cells[7][:-2]) <= 60
        watch = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#watches td")]
        assert watch[:4] == [MODEL, PARAM, "1", "—"]

        # The model page marks the watched parameter, and only it.
        driver.get(base + f"/#/model/{MODEL}")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#params td"))
        rows = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                for r in driver.find_elements(By.CSS_SELECTOR, "#params tr")[1:]]
        assert [(r[0], r[4]) for r in rows] == [
            ("0.weight", "watched"), ("0.bias", ""), ("1.weight", ""), ("1.bias", "")]
    finally:
        alice.close_session(session.id)

    # Two steps recorded: the history plots have value axes and a hover point
    # per record; the histogram a count axis up to its tallest bin.
    with st.attach(alice, MODEL, [0, 1], lease_seconds=30) as trainer:
        for n in (1, 2):
            with trainer.step(n) as step:
                step.between()
                step.backward()
                step.optimizer()
    deadline = time.monotonic() + 15
    while len(alice.show_watch(MODEL, PARAM).records) < 2:
        assert time.monotonic() < deadline, "no watch records"
        time.sleep(0.05)
    records = alice.show_watch(MODEL, PARAM).records
    driver.get(base + f"/#/param/{MODEL}/{PARAM}?bins=8")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#norm-plot circle.point"))
    for plot, value in (("#norm-plot", "l2_norm"), ("#absmax-plot", "abs_max")):
        points = driver.find_elements(By.CSS_SELECTOR, f"{plot} circle.point")
        assert [p.get_attribute("data-step") for p in points] == ["1", "2"]
        assert points[1].find_element(By.TAG_NAME, "title").get_attribute(
            "textContent").startswith("step 2: ")
        ticks = [float(t.get_attribute("data-value"))
                 for t in driver.find_elements(By.CSS_SELECTOR, f"{plot} g.tick")]
        top = max(getattr(r, value) for r in records)
        assert len(ticks) == 3 and ticks[0] == 0 and ticks[2] == pytest.approx(top)
    bars = [int(b.get_attribute("data-count"))
            for b in driver.find_elements(By.CSS_SELECTOR, "#histogram rect.bin")]
    ticks = [float(t.get_attribute("data-value"))
             for t in driver.find_elements(By.CSS_SELECTOR, "#histogram g.tick")]
    assert len(bars) == 8 and ticks == [0, max(bars) / 2, max(bars)]
    assert driver.find_element(By.CSS_SELECTOR, "#histogram .axis-name").text == "count"

    # An error state ends: no such model says so instead of "loading…".
    driver.get(base + "/#/model/absent")
    wait.until(lambda d: d.find_elements(By.ID, "error"))
    assert "absent" in driver.find_element(By.ID, "error").text
    assert "loading" not in driver.find_element(By.ID, "main").text
    assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-error") == \
        "NOT_FOUND"
    alice.remove_watch(MODEL)
