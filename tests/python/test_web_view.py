"""The web view (server/web, docs/api.md "Web view") in a real browser:
Debian's chromium driven headless by selenium against a real TLS summond
with viewer tokens, whose model a trainer steps between the checks. With
TLS the page, /api/ and /metrics are HTTPS with the gRPC port's certificate:
urllib checks it against the test CA; chromium is told to ignore it
(--ignore-certificate-errors, in this test only).

SUMMON_SCREENSHOTS=DIR saves the pages' screenshots there (docs/img/).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Optional

import grpc
import pytest
import torch

import summon
import summon.torch as st
from summon.local import REPO_ROOT, LocalDaemon
from summon.v1 import summon_pb2, summon_pb2_grpc

try:  # Only the browser tests need selenium (client/python/requirements.txt).
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None

TOKENS = {"admin": "admin-secret", "viewer": "viewer-secret"}
MODEL = "net"
PARAM = "0.weight"


def tiny() -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8))


@pytest.fixture
def web(tmp_path: Path, start_daemon: Callable[..., LocalDaemon]) -> Iterator[dict]:
    pki = tmp_path / "pki"
    subprocess.run([str(REPO_ROOT / "tests/security/make_pki.sh"), str(pki)], check=True,
                   capture_output=True)
    lines = [f"{hashlib.sha256(t.encode()).hexdigest()} web-{role} {role}"
             for role, t in TOKENS.items()]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    port_file = tmp_path / "metrics.port"
    daemon = start_daemon(local_ranks=2, insecure_local=False, extra_args=[
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tokens", str(tmp_path / "tokens"),
        "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(port_file)])
    deadline = time.monotonic() + 10
    while not port_file.exists() or not port_file.read_text().strip():
        assert time.monotonic() < deadline, "no --metrics-port-file"
        time.sleep(0.02)
    _tls["context"] = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    admin = summon.Client(daemon.tcp_address, tls_ca=str(pki / "ca.crt"),
                          token=TOKENS["admin"], timeout=30)
    try:
        net = tiny()
        st.register(admin, MODEL, net, [net[0], net[1]])
        with st.attach(admin, MODEL, [0, 1], lease_seconds=30) as trainer:
            yield {"base": f"https://127.0.0.1:{port_file.read_text().strip()}",
                   "admin": admin, "trainer": trainer, "ca": pki / "ca.crt",
                   "address": daemon.tcp_address}
    finally:
        # LocalDaemon's own cleanup speaks plaintext: delete the model (and
        # so its shared-memory shards) as the admin.
        for model in admin.list_models():
            admin.delete_model(model.name, force=True)
        admin.close()


def train_step(trainer, n: int) -> None:
    """One real step: the optimizer halves every shard element in place."""
    with trainer.step(n) as step:
        step.between()
        step.backward()
        step.optimizer()
        for rank in (0, 1):
            for unit in trainer.shard_views(rank).units.values():
                unit.params.mul_(0.5)


# The test CA (make_pki.sh), the one that signs the daemon's certificate.
_tls: dict[str, ssl.SSLContext] = {}


def get(url: str, token: Optional[str] = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30,
                                    context=_tls.get("context")) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_over_tls_only_with_the_ca(web: dict) -> None:
    """The TLS daemon's listener is HTTPS: its certificate verifies with the
    test CA (host 127.0.0.1), not without it, and plain HTTP gets no page."""
    base = web["base"]
    assert base.startswith("https://")
    status, body = get(base + "/api/models", token=TOKENS["viewer"])
    assert status == 200, body
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(base + "/metrics", timeout=30,
                               context=ssl.create_default_context())
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    # The login cookie is Secure over HTTPS (never sent back in the clear).
    host, port = base[len("https://"):].split(":")
    connection = http.client.HTTPSConnection(host, int(port), timeout=30,
                                             context=_tls["context"])
    connection.request("POST", "/login", body=f"token={TOKENS['viewer']}",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    response = connection.getresponse()
    assert response.status == 303
    assert response.getheader("Set-Cookie") == (
        f"summon_token={TOKENS['viewer']}; Path=/; HttpOnly; SameSite=Strict; Secure")
    connection.close()
    plain = "http://" + base[len("https://"):]
    for path in ("/", "/api/models", "/metrics"):
        request = urllib.request.Request(plain + path)
        request.add_header("Authorization", f"Bearer {TOKENS['viewer']}")
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(request, timeout=30).read()


def test_without_a_viewer_token_page_and_api_are_refused(web: dict) -> None:
    base = web["base"]
    status, body = get(base + "/")
    assert status == 401 and 'action="/login"' in body
    for path in ("/api/models", "/api/cluster", f"/api/stats?model={MODEL}&param={PARAM}"):
        status, body = get(base + path)
        assert status == 401, path
        assert json.loads(body)["error"]["code"] == "UNAUTHENTICATED"
        status, _ = get(base + path, token="not-a-token")
        assert status == 401
    status, body = get(base + "/api/models", token=TOKENS["viewer"])
    assert status == 200, body
    assert [m["name"] for m in json.loads(body)["models"]] == [MODEL]
    # /metrics stays as it was: open to the scraper.
    assert get(base + "/metrics")[0] == 200


def test_api_answers_as_the_rpcs_do(web: dict) -> None:
    base, viewer = web["base"], TOKENS["viewer"]
    cluster = json.loads(get(f"{base}/api/cluster", viewer)[1])
    assert (cluster["answered_by"], cluster["leader"], cluster["epoch"], cluster["ready"],
            cluster["models"]) == (0, 0, "0", True, [MODEL])
    assert [(n["node"], n["state"], n["leader"], n["first_rank"], n["local_ranks"])
            for n in cluster["nodes"]] == [(0, "NODE_STATE_UP", True, 0, 2)]
    train_step(web["trainer"], 1)
    model = json.loads(get(f"{base}/api/models/{MODEL}", viewer)[1])
    assert [(r["rank"], r["phase"], r["step"]) for r in model["ranks"]] == [
        (0, "TRAINING_PHASE_IDLE", "1"), (1, "TRAINING_PHASE_IDLE", "1")]
    status, body = get(f"{base}/api/stats?model={MODEL}&param={PARAM}&bins=8", viewer)
    assert status == 200, body
    stats = json.loads(body)["tensors"][0]
    expected = (tiny()[0].weight.detach().double() * 0.5)
    assert stats["info"]["shape"] == ["64", "32"]
    assert stats["l2_norm"] == pytest.approx(expected.norm().item(), rel=1e-6)
    assert stats["min"] == pytest.approx(expected.min().item(), rel=1e-6)
    counts = [int(c) for c in stats["histogram"]["counts"]]
    assert len(counts) == 8 and sum(counts) == 64 * 32
    assert get(f"{base}/api/stats?model={MODEL}&param=nope", viewer)[0] == 404
    assert get(f"{base}/api/stats?model={MODEL}&param={PARAM}&bins=-1", viewer)[0] == 400
    assert get(f"{base}/api/models/absent", viewer)[0] == 404
    # Watches (ListWatches, ShowWatch): none here, and an unwatched
    # parameter's history is NOT_FOUND.
    assert json.loads(get(f"{base}/api/watches", viewer)[1]) == {
        "watches": [], "nodes_down": []}
    status, body = get(f"{base}/api/watch?model={MODEL}&param={PARAM}", viewer)
    assert status == 404 and json.loads(body)["error"]["code"] == "NOT_FOUND"
    assert get(f"{base}/api/watch?model={MODEL}&param={PARAM}&since=x", viewer)[0] == 400
    # Looking leaves nothing open.
    assert web["admin"].list_sessions() == []
    # Sessions as R12 shows them: the owner (and admins) see one, others not.
    session = web["admin"].open_session(MODEL, scope="0", writeback=False)
    try:
        seen = json.loads(get(f"{base}/api/sessions", TOKENS["admin"])[1])["sessions"]
        assert [(s["id"], s["owner"], s["model"]) for s in seen] == [
            (session.id, "web-admin", MODEL)]
        assert json.loads(get(f"{base}/api/sessions", viewer)[1])["sessions"] == []
    finally:
        web["admin"].close_session(session.id)


def test_the_in_process_headers_are_not_believed_from_outside(web: dict) -> None:
    """The web view's in-process calls carry its viewer in forwarded headers
    plus a per-process key; a TLS caller forging them gains nothing."""
    credentials = grpc.ssl_channel_credentials(web["ca"].read_bytes())
    with grpc.secure_channel(web["address"], credentials) as channel:
        stub = summon_pb2_grpc.SummonStub(channel)
        for key in ("0" * 32, ""):
            with pytest.raises(grpc.RpcError) as refused:
                stub.DeleteModel(summon_pb2.DeleteModelRequest(model=MODEL), timeout=10,
                                 metadata=[("summon-inprocess-key", key),
                                           ("summon-principal", "eve"),
                                           ("summon-forwarded-roles", "admin")])
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert [m.name for m in web["admin"].list_models()] == [MODEL]


@pytest.fixture
def browser(chromium) -> object:
    if webdriver is None:
        pytest.skip("no selenium: scripts/setup (client/python/requirements.txt)")
    # The daemon's certificate is the test CA's, which chromium's NSS store
    # does not hold: this test alone skips the check (urllib's tests above
    # check the certificate against the CA).
    return chromium("--ignore-certificate-errors")


def screenshot(driver, name: str) -> None:
    directory = os.environ.get("SUMMON_SCREENSHOTS")
    if directory:
        driver.save_screenshot(str(Path(directory) / f"{name}.png"))


def severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def log_in(driver, base: str) -> "WebDriverWait":
    """The login form with the viewer token; returns once the overview shows."""
    wait = WebDriverWait(driver, 20)
    driver.get(base + "/login")
    driver.find_element(By.ID, "token").send_keys(TOKENS["viewer"])
    driver.find_element(By.ID, "login").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#models td"))
    return wait


def test_pages_in_a_real_browser(web: dict, browser) -> None:
    base, driver = web["base"], browser
    wait = log_in(driver, base)
    cookie = driver.get_cookie("summon_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert MODEL in driver.find_element(By.ID, "models").text
    screenshot(driver, "web-overview")

    train_step(web["trainer"], 1)
    driver.get(base + f"/#/model/{MODEL}")
    wait.until(lambda d: "IDLE" in d.find_element(By.ID, "ranks").text)
    rows = driver.find_elements(By.CSS_SELECTOR, "#ranks tr")[1:]
    assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows] == ["1", "1"]
    screenshot(driver, "web-model")

    driver.get(base + f"/#/param/{MODEL}/{PARAM}?bins=12")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#histogram rect.bin"))
    bars = driver.find_elements(By.CSS_SELECTOR, "#histogram rect.bin")
    api = json.loads(get(f"{base}/api/stats?model={MODEL}&param={PARAM}&bins=12",
                         TOKENS["viewer"])[1])["tensors"][0]
    assert len(bars) == 12
    assert [int(b.get_attribute("data-count")) for b in bars] == [
        int(c) for c in api["histogram"]["counts"]]
    assert "Not watched" in driver.find_element(By.ID, "watch").text
    screenshot(driver, "web-param")
    assert severe(driver) == []


def records(admin: summon.Client, count: int, timeout: float = 15.0) -> list:
    """Waits for the watch worker (off the trainer's path) to record `count` steps."""
    deadline = time.monotonic() + timeout
    while True:
        shown = admin.show_watch(MODEL, PARAM)
        if len(shown.records) >= count or time.monotonic() > deadline:
            return list(shown.records)
        time.sleep(0.02)


def watched_step(trainer, admin: summon.Client, n: int) -> None:
    """A step, then its watch record: a step taken before the worker read the
    last one's shards would replace it (summon_watch_skipped_total, by design)."""
    train_step(trainer, n)
    assert [r.step for r in records(admin, n)][-1] == n


def test_watched_history_plots_in_a_real_browser(web: dict, browser) -> None:
    base, driver, admin, trainer = web["base"], browser, web["admin"], web["trainer"]
    admin.add_watch(MODEL, [PARAM], histogram_bins=8)
    for n in (1, 2):
        watched_step(trainer, admin, n)
    assert len(records(admin, 2)) == 2
    wait = log_in(driver, base)
    driver.get(base + f"/#/param/{MODEL}/{PARAM}")
    points = lambda d: [int(p.get_attribute("data-points")) for p in d.find_elements(  # noqa: E731
        By.CSS_SELECTOR, "#norm-plot polyline.series")]
    wait.until(lambda d: points(d) == [2])
    assert driver.find_elements(By.CSS_SELECTOR, "circle.nonfinite") == []

    # A step adds a point (the page refreshes itself every 5 s).
    watched_step(trainer, admin, 3)
    assert len(records(admin, 3)) == 3
    wait.until(lambda d: points(d) == [3])

    # A NaN written back through a session shows as a marker at its step.
    session = admin.open_session(MODEL, params=[PARAM])
    admin.write_tensor(session.id, PARAM, torch.tensor([float("nan")]).numpy(),
                       offset=5, count=1)
    admin.close_session(session.id)
    train_step(trainer, 4)
    shown = records(admin, 4)
    assert [(r.step, r.nan_count) for r in shown] == [(1, 0), (2, 0), (3, 0), (4, 1)]
    wait.until(lambda d: points(d) == [4])
    for plot in ("#norm-plot", "#absmax-plot"):
        markers = driver.find_elements(By.CSS_SELECTOR, f"{plot} circle.nonfinite")
        assert [m.get_attribute("data-step") for m in markers] == ["4"]
    assert "first NaN/Inf at step 4" in driver.find_element(By.ID, "main").text
    screenshot(driver, "web-watch")
    assert severe(driver) == []


def test_mid_step_the_page_shows_the_last_record(web: dict, browser) -> None:
    """A trainer mid-step refuses /api/stats (R1): a watched parameter's page
    shows its last watch record instead, saying so, with no console error."""
    base, driver, admin, trainer = web["base"], browser, web["admin"], web["trainer"]
    admin.add_watch(MODEL, [PARAM], histogram_bins=6)
    for n in (1, 2):
        watched_step(trainer, admin, n)
    last = records(admin, 2)[-1]
    assert last.step == 2
    wait = log_in(driver, base)
    with trainer.step(3):  # FORWARD on both ranks: sessions are refused
        status, body = get(f"{base}/api/stats?model={MODEL}&param={PARAM}",
                           TOKENS["viewer"])
        assert status == 409, body  # docs/api.md: FAILED_PRECONDITION (R1)
        driver.get(base + f"/#/param/{MODEL}/{PARAM}")
        wait.until(lambda d: d.find_elements(By.ID, "midstep"))
        assert driver.find_element(By.ID, "midstep").text == (
            "mid-step, showing step 2 (the last watch record)")
        cells = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#stats td")]
        assert cells[0] == "[64, 32]"
        assert [float(c) for c in cells[1:5]] == pytest.approx(
            [last.min, last.max, last.mean, last.l2_norm], rel=1e-5)
        assert cells[5:] == [str(last.nan_count), str(last.inf_count)]
        bars = driver.find_elements(By.CSS_SELECTOR, "#histogram rect.bin")
        assert [int(b.get_attribute("data-count")) for b in bars] == list(
            last.histogram.counts)
        assert severe(driver) == []
    # Between steps the page asks /api/stats again (its own bins).
    wait.until(lambda d: not d.find_elements(By.ID, "midstep"))
    assert len(driver.find_elements(By.CSS_SELECTOR, "#histogram rect.bin")) == 32
