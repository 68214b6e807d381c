"""One-shot reads (issue 33): `summonctl tensor get MODEL FQN --out f.npy` and
Client.get_tensor open a read-only session of exactly that parameter, read
and close it, so no session is left open: not on success, not on an error
after the open, not on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import summon
from summon.local import REPO_ROOT, LocalDaemon, summonctl_binary

FQN = "norm.weight"


def open_sessions(client: summon.Client) -> int:
    return client.list_models()[0].open_sessions


def expected(client: summon.Client) -> np.ndarray:
    session = client.open_session("gpt", params=[FQN], writeback=False)
    try:
        return client.read_tensor(session.id, FQN)
    finally:
        client.close_session(session.id)


@pytest.fixture
def gpt(client: summon.Client) -> summon.Client:
    client.create_model("gpt", (REPO_ROOT / "examples/gpt_tiny.json").read_text(),
                        init="seeded:42")
    return client


def test_tensor_get_writes_the_parameter_and_leaves_no_session(
        gpt: summon.Client, daemon: LocalDaemon, tmp_path: Path) -> None:
    want = expected(gpt)
    out = tmp_path / "w.npy"
    got = subprocess.run([summonctl_binary(), "--server", daemon.address, "--quiet",
                          "tensor", "get", "gpt", FQN, "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert " ".join(got.stdout.split()) == f"FQN DTYPE SHAPE NUMEL {FQN} FLOAT32 [16] 16"
    np.testing.assert_array_equal(np.load(out), want)
    assert open_sessions(gpt) == 0

    # An error after the open (the file cannot be created) closes it too.
    bad = subprocess.run([summonctl_binary(), "--server", daemon.address, "tensor", "get",
                          "gpt", FQN, "--out", str(tmp_path / "no-dir" / "w.npy")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 73, bad.stderr
    assert open_sessions(gpt) == 0


def test_tensor_get_closes_the_session_on_ctrl_c(
        gpt: summon.Client, daemon: LocalDaemon, tmp_path: Path) -> None:
    # Nobody reads the FIFO: summonctl blocks opening it, session open.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    process = subprocess.Popen([summonctl_binary(), "--server", daemon.address, "tensor",
                                "get", "gpt", FQN, "--out", str(fifo)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while open_sessions(gpt) != 1:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 128 + signal.SIGINT
        assert open_sessions(gpt) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_get_tensor_reads_and_closes_even_when_interrupted(gpt: summon.Client) -> None:
    want = expected(gpt)
    np.testing.assert_array_equal(gpt.get_tensor("gpt", FQN), want)
    assert gpt.get_tensor("gpt", FQN, dtype="float16").dtype == np.float16
    assert open_sessions(gpt) == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    gpt.read_tensor = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        gpt.get_tensor("gpt", FQN)
    assert open_sessions(gpt) == 0
