"""README.md's 2-node cluster example, run as pasted (its fixed ports and
/tmp directories swapped for free ones under pytest's tmp dir): the nodes
share one --checkpoint-root, so `model save` through a follower writes the
checkpoint; and with each node's default root instead, the save is refused
saying what is wrong (the path is not beneath every node's root), not
naming a symlink that does not exist."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

import summon
from summon.local import REPO_ROOT
from polling import free_port

README = REPO_ROOT / "README.md"


def cluster_block() -> str:
    text = README.read_text()
    start = text.index("A cluster is one summond per node")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert block, "README.md has no cluster example"
    return block.group(1)


def localized(block: str, tmp_path: Path) -> tuple[str, list[int]]:
    ports = [free_port(), free_port()]
    for old, new in (("17170", str(ports[0])), ("17171", str(ports[1])),
                     ("/tmp/summon-ckpt", str(tmp_path / "ckpt")),
                     ("/tmp/n0", str(tmp_path / "n0")), ("/tmp/n1", str(tmp_path / "n1"))):
        block = block.replace(old, new)
    return block, ports


def create_when_formed(address: str, name: str) -> summon.Client:
    """Creates `name` once the cluster serves (UNAVAILABLE until it formed)."""
    client = summon.Client(address, timeout=30)
    layout = (REPO_ROOT / "examples/gpt_tiny.json").read_text()
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_model(name, layout, init="seeded:42")
            return client
        except summon.SummonError as error:
            assert error.code == "UNAVAILABLE" and time.monotonic() < deadline, error
            time.sleep(0.1)


def run_cluster(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Runs `script` (its daemons in the background) and leaves the daemons'
    pids in tmp_path/pids for the caller to stop."""
    pids = tmp_path / "pids"
    # The daemons' logs into a file of their own, and every output into
    # files, not pipes: the daemons keep theirs open after the script ends.
    wrapped = script.replace(
        " &\n", f" >> {tmp_path / 'daemons.log'} 2>&1 &\necho $! >> {pids}\n")
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run(["bash", "-c", wrapped], cwd=REPO_ROOT, stdout=stdout,
                              stderr=stderr, text=True, timeout=120)
    done.stdout, done.stderr = out.read_text(), err.read_text()
    return done


def stop(tmp_path: Path, address: str) -> None:
    client = summon.Client(address, timeout=30)
    try:
        for model in client.list_models():
            client.delete_model(model.name, force=True)  # No segment left behind.
    finally:
        client.close()
        pids = tmp_path / "pids"
        for pid in pids.read_text().split() if pids.exists() else []:
            subprocess.run(["kill", pid], check=False)
        time.sleep(0.5)


def test_the_readme_cluster_example_saves_as_pasted(tmp_path: Path) -> None:
    script, ports = localized(cluster_block(), tmp_path)
    assert "--checkpoint-root" in script
    try:
        done = run_cluster(script, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / "ckpt" / "gpt.safetensors").is_file()
        size = (tmp_path / "ckpt" / "gpt.safetensors").stat().st_size
        assert done.stdout.endswith(
            f"FILE\n{tmp_path / 'ckpt' / 'gpt.safetensors'}\n\nbytes_written  {size}\n"), \
            done.stdout
    finally:
        stop(tmp_path, f"127.0.0.1:{ports[0]}")


def test_a_cluster_with_each_nodes_default_root_says_what_is_wrong(tmp_path: Path) -> None:
    """The README's example before it named a shared root."""
    script, ports = localized(cluster_block(), tmp_path)
    script = re.sub(r" --checkpoint-root \S+", "", script)
    script = script[:script.index("bazel-bin/client/summonctl")]  # Only the daemons.
    try:
        done = run_cluster(script, tmp_path)
        assert done.returncode == 0, done.stderr
        client = create_when_formed(f"127.0.0.1:{ports[1]}", "gpt")
        with pytest.raises(summon.SummonError) as refused:
            client.save_model("gpt", "gpt.safetensors")
        client.close()
        assert refused.value.code == "FAILED_PRECONDITION"
        leader_file = tmp_path / "n0" / "checkpoints" / "gpt.safetensors"
        assert refused.value.message == (
            f"node 1: checkpoint path '{leader_file}' resolves outside the checkpoint "
            f"roots (--checkpoint-root): {tmp_path / 'n1' / 'checkpoints'}. "
            "Every node of a cluster writes and reads the same checkpoint files: give "
            "every node the same --checkpoint-root, a directory all of them see at "
            "that path (shared storage; on one host any directory), not each node's "
            "default <data-dir>/checkpoints")
        assert not leader_file.exists()
    finally:
        stop(tmp_path, f"127.0.0.1:{ports[0]}")
