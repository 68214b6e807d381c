"""summonctl's refusals name the flags the user types (issue 33), beside the
API's field for gRPC callers: each run against a real summond."""

from __future__ import annotations

import subprocess

import pytest

import summon
from summon.local import REPO_ROOT, LocalDaemon, summonctl_binary


def summonctl(daemon: LocalDaemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([summonctl_binary(), "--server", daemon.address, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def gpt(client: summon.Client) -> summon.Client:
    client.create_model("gpt", (REPO_ROOT / "examples/gpt_tiny.json").read_text(),
                        init="seeded:42")
    return client


def test_refusals_name_the_flag(gpt: summon.Client, daemon: LocalDaemon) -> None:
    session = gpt.open_session("gpt", params=["norm.weight"], writeback=False)
    try:
        cases = [
            (["session", "open", "gpt", "--rank0-only", "--home-rank", "7"],
             "ERROR INVALID_ARGUMENT: home rank 7 is outside the world of 2 ranks "
             "(--home-rank R, home_rank)"),
            (["watch", "add", "gpt", "--every", "-1"],
             "ERROR INVALID_ARGUMENT: every must be >= 1 (--every N, every), got -1"),
            (["tensor", "stats", session.id, "--bins", "5000"],
             "ERROR INVALID_ARGUMENT: a histogram has at most 4096 bins "
             "(--bins N, histogram_bins), got 5000"),
            (["tensor", "read", session.id, "norm.weight", "--grad", "--out", "-"],
             f"ERROR NOT_FOUND: session {session.id} has no gradients (opened without "
             "gradients: --with-grads, with_grads)"),
        ]
        for args, error in cases:
            run = summonctl(daemon, *args)
            assert run.returncode != 0, args
            assert run.stderr.splitlines()[0] == error, args
        opened = summonctl(daemon, "session", "open", "gpt", "--scope", "layers",
                           "--no-recurse", "--no-writeback")
        assert opened.returncode == 0, opened.stderr
        assert "module 'layers' is not a unit (--no-recurse, recurse=false)" in opened.stderr
        gpt.close_session(opened.stdout.strip())
    finally:
        gpt.close_session(session.id)
