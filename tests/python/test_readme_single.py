"""README.md's "Running it yourself" block, run as pasted from the clone (its
fixed port and /tmp paths swapped for free ones under pytest's tmp dir, the
`bazel build` line left out: the binaries are built): every command
succeeds, the files it names appear where it says, and the clone is left as
it was (nothing written into it)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import numpy as np

import summon
from summon.local import REPO_ROOT
from polling import free_port

README = REPO_ROOT / "README.md"


def clone_state() -> str:
    """What git sees in the clone, untracked and ignored files included
    (bazel's convenience links aside)."""
    return subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all",
                           "--", ".", ":!bazel-*"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_the_readme_single_node_example_runs_as_pasted(tmp_path: Path) -> None:
    text = README.read_text()
    start = text.index("## Running it yourself")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S).group(1)
    assert "/tmp/w.npy" in block and "bazel-bin/client/summonctl" in block
    port = str(free_port())
    script = "\n".join(line for line in block.splitlines()
                       if not line.startswith("bazel build"))
    for old, new in (("7070", port), ("/tmp/summon", str(tmp_path / "data")),
                     ("/tmp/w.npy", str(tmp_path / "w.npy")),
                     ("/tmp/layers1.npz", str(tmp_path / "layers1.npz"))):
        script = script.replace(old, new)
    script = script.replace(" &\n", f" >> {tmp_path / 'summond.log'} 2>&1 &\n"
                            f"echo $! > {tmp_path / 'pid'}\n")
    before = clone_state()
    try:
        done = subprocess.run(["bash", "-ec", script], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert clone_state() == before
        with np.load(tmp_path / "layers1.npz") as scope:
            assert (scope["layers.1.attn.qkv.weight"].tobytes()
                    == np.load(tmp_path / "w.npy").tobytes())
    finally:
        client = summon.Client(f"127.0.0.1:{port}", timeout=30)
        try:
            for model in client.list_models():
                client.delete_model(model.name, force=True)  # No segment left behind.
        finally:
            client.close()
            subprocess.run(["kill", (tmp_path / "pid").read_text().strip()], check=False)
            time.sleep(0.5)
