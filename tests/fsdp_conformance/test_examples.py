"""The README's "From PyTorch" script, pasted as it is, and examples/fsdp{1,2}_train.py
run under torchrun (W = 2) against a summond: each leaves its model READY in
summond with the trained values, readable from this process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import summon
from conftest import REPO, free_port


def readme_script() -> str:
    """The first python block of README.md's "From PyTorch" section."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## From PyTorch"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("script,args,model,tensor", [
    ("README.md", [], "mlp", "1.weight"),
    ("examples/fsdp2_train.py", ["--steps", "3"], "gpt", "blocks.0.qkv.weight"),
    ("examples/fsdp1_train.py", ["--steps", "3"], "gpt1", "blocks.0.qkv.weight"),
])
def test_runs_under_torchrun(daemons, tmp_path: Path, script: str, args: list[str],
                             model: str, tensor: str) -> None:
    daemon = daemons(2)
    path = REPO / script
    if script == "README.md":
        path = tmp_path / "train.py"
        path.write_text(readme_script())
    env = dict(os.environ, SUMMON_SERVER=daemon.address, OMP_NUM_THREADS="1",
               PYTHONPATH=str(REPO / "client" / "python"))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(free_port()), str(path), *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with summon.Client(daemon.address) as client:
        try:
            assert client.describe_model(model).state == "READY"
            assert [r.phase for r in client.describe_model(model).ranks] == ["IDLE", "IDLE"]
            with client.summon_full_params(model, writeback=False) as session:
                assert session.read(tensor).any()
        finally:
            client.delete_model(model, force=True)
