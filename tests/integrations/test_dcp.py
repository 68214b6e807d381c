"""DCP in and out of summon (summon.torch.save_dcp / load_dcp).

An FSDP2 job at W = 2 (worker.py, mode dcp) trains a tiny Llama served by
summon, saves its own sharded DCP checkpoint, and loads the one save_dcp wrote
from summond into a fresh FSDP2 model: it equals what FSDP had, bit for bit.
Here the job's DCP checkpoint goes into a summon model laid out for 4 ranks
(another world size: DCP reshards) and a session reads it bit for bit.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import summon
import summon.torch as st
from .conftest import WORKER, base, run  # noqa: F401

PARAMETERS = 21


def load_worker():
    """worker.py as a module of its own name (tests/fsdp_conformance has a worker too)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("integrations_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def job(daemons, tmp_path_factory):
    out = tmp_path_factory.mktemp("dcp")
    daemon = daemons(2)
    run(daemon, 2, [{"mode": "dcp", "name": "int-dcp"}], out)
    client = summon.Client(daemon.address)
    yield client, out, torch.load(out / "int-dcp.pt")
    base.delete_model(client, "int-dcp")
    client.close()


def test_fsdp2_loads_what_save_dcp_wrote(job):
    _, _, result = job
    assert result["sharding"] == f"fsdp2 Shard(0) {PARAMETERS}"
    assert result["saved"] == PARAMETERS
    assert result["reloaded"].keys() == result["params"].keys()
    for fqn, tensor in result["params"].items():
        assert torch.equal(result["reloaded"][fqn], tensor), fqn


def test_load_dcp_reshards_into_another_world(job, daemons):
    client2, out, result = job
    llama = load_worker().build_llama(seed=3)
    client = summon.Client(daemons(4).address)
    try:
        st.register(client, "int-dcp4", llama, unit_modules=list(llama.model.layers),
                    grads=False)
        assert client.describe_model("int-dcp4").world_size == 4
        assert st.load_dcp(client, "int-dcp4", out / "int-dcp-fsdp2") == PARAMETERS
        assert base.assert_session_equals(client, "int-dcp4", result["params"]) == PARAMETERS
        # And back out through the command line: a checkpoint FSDP2 loads as above.
        done = subprocess.run([sys.executable, "-m", "summon.dcp", "save", "int-dcp4",
                               str(out / "cli"), "--server", client.address],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"saved {PARAMETERS} tensors of model 'int-dcp4' to {out / 'cli'}\n"
    finally:
        base.delete_model(client, "int-dcp4")
        client.close()


def test_load_dcp_refuses_a_checkpoint_of_another_model(job, tmp_path):
    client, out, _ = job
    import torch.distributed.checkpoint as dcp
    dcp.save({"other.weight": torch.zeros(2)}, checkpoint_id=str(tmp_path), no_dist=True)
    with pytest.raises(ValueError, match=r"has no \['lm_head.weight', 'model.embed_tokens."
                                         r"weight', 'model.layers.0.input_layernorm.weight'\]"
                                         r" of model 'int-dcp' \(21 missing\)"):
        st.load_dcp(client, "int-dcp", tmp_path)
