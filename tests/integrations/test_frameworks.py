"""Each framework trains a tiny Llama with FSDP2 (Lightning also FSDP1) on
gloo (W = 2), served by
summon's integration; a session from this process equals the framework's own
full parameters bit for bit, and an edit through the session changed training
exactly as the same edit through the framework did (worker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import summon
import torch

from .conftest import WORKER, base, run  # noqa: F401

PARAMETERS = 21  # the tiny Llama: 2 layers x 9, embed, final norm, head
MODES = ("hf", "accelerate", "lightning", "lightning-fsdp1")
SHARDING = {"lightning-fsdp1": "fsdp1 FlatParameter 3"}  # 2 layers and the root


@pytest.fixture(scope="module")
def jobs(daemons, tmp_path_factory):
    """(client, out); a framework's job runs the first time load() asks for it."""
    out = tmp_path_factory.mktemp("frameworks")
    daemon = daemons(2)
    client = summon.Client(daemon.address)
    yield client, out, daemon
    for mode in MODES:
        base.delete_model(client, f"int-{mode}")
    client.close()


def load(jobs, mode: str) -> dict:
    """The results of the framework's job (one per framework: each starts its
    own process group and framework state)."""
    _, out, daemon = jobs
    if not (out / f"int-{mode}.pt").exists():
        run(daemon, 2, [{"mode": mode, "name": f"int-{mode}"}], out)
    return torch.load(out / f"int-{mode}.pt")


@pytest.mark.parametrize("mode", MODES)
def test_model_really_is_sharded(jobs, mode):
    result = load(jobs, mode)
    expected = SHARDING.get(mode, f"fsdp2 Shard(0) {PARAMETERS}")
    assert result["served"]["sharding"] == expected
    assert result["plain"]["sharding"] == expected


@pytest.mark.parametrize("mode", MODES)
def test_session_equals_framework(jobs, mode):
    client, name = jobs[0], f"int-{mode}"
    params = load(jobs, mode)["served"]["params"]
    prefix = "model." if mode.startswith("lightning") else ""
    assert f"{prefix}model.layers.1.self_attn.q_proj.weight" in params
    assert client.describe_model(name).state == "READY"
    assert base.assert_session_equals(client, name, params) == PARAMETERS


@pytest.mark.parametrize("mode", MODES)
def test_outside_edit_equals_framework_edit(jobs, mode):
    result = load(jobs, mode)
    served, plain = result["served"]["params"], result["plain"]["params"]
    assert served.keys() == plain.keys()
    for fqn, tensor in plain.items():
        assert torch.equal(served[fqn], tensor), fqn


@pytest.mark.parametrize("mode", MODES)
def test_phases_from_framework_events(jobs, mode):
    """At the optimizer step serve's trainer and summond have the rank in
    OPTIMIZER, after it IDLE with the step counted (HF and Lightning: their
    own events; Accelerate: the optimizer's hooks, read after each step)."""
    phases = [tuple(p) for p in load(jobs, mode)["served"]["phases"]]
    if mode == "accelerate":
        assert phases == [("IDLE", "IDLE", s) for s in (1, 2, 3)]
    else:
        assert phases == [p for s in (1, 2, 3)
                          for p in (("OPTIMIZER", "OPTIMIZER", s - 1), ("IDLE", "IDLE", s))]
