"""summon.torch's layouts from nn.Modules, register (init from the module's own
values) and the shard views in shared memory, for float32, bfloat16, float16
and empty units."""

from __future__ import annotations

import enum

import numpy as np
import pytest
import torch

import summon
import summon.torch as st
from summon import dtypes


class Block(torch.nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(5, dtype=dtype)
        self.fc = torch.nn.Linear(5, 7, dtype=dtype)


class Net(torch.nn.Module):
    """Root params, a tied head, a ModuleList container and blocks of other dtypes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(11, 5)
        self.blocks = torch.nn.ModuleList([Block(torch.bfloat16), Block(torch.float16)])
        self.head = torch.nn.Linear(5, 11, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(3))


def test_layout_units_order_ties_and_dtypes() -> None:
    net = Net()
    layout = st.layout_from_module(net, [net.blocks[1], "blocks.0", net.blocks], "FULL_SHARD")
    assert layout["strategy"] == "FULL_SHARD" and layout["use_orig_params"] is True
    assert [u["fqn"] for u in layout["units"]] == ["", "blocks", "blocks.0", "blocks.1"]
    root, container, first, second = layout["units"]
    assert root["params"] == [
        {"fqn": "embed.weight", "shape": [11, 5], "dtype": "float32"},
        {"fqn": "head.weight", "alias_of": "embed.weight"}]
    assert container["params"] == []  # every parameter lies in a deeper unit
    assert [p["fqn"] for p in first["params"]] == [
        "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc.weight", "blocks.0.fc.bias"]
    assert {p["dtype"] for p in first["params"]} == {"bfloat16"}
    assert {p["dtype"] for p in second["params"]} == {"float16"}
    assert first["params"][2]["shape"] == [7, 5]
    # Every named_parameters() entry appears once, in that order.
    listed = [p["fqn"] for u in layout["units"] for p in u["params"] if "shape" in p]
    assert sorted(listed) == sorted(n for n, _ in net.named_parameters())


def test_layout_strategy_names() -> None:
    class ShardingStrategy(enum.Enum):  # torch.distributed.fsdp's, which needs CUDA here
        SHARD_GRAD_OP = 2
        _HYBRID_SHARD_ZERO2 = 5

    net = torch.nn.Linear(2, 2)
    assert st.layout_from_module(net, strategy=ShardingStrategy.SHARD_GRAD_OP)["strategy"] \
        == "SHARD_GRAD_OP"
    assert st.layout_from_module(net, strategy=ShardingStrategy._HYBRID_SHARD_ZERO2)[
        "strategy"] == "_HYBRID_SHARD_ZERO2"
    assert st.layout_from_module(net, strategy="no_shard")["strategy"] == "NO_SHARD"


def test_layout_refuses_integer_tensors_r14_and_mixed_units() -> None:
    units = ["blocks.0", "blocks.1"]
    net = Net()
    net.steps = torch.nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False)
    with pytest.raises(ValueError, match=r"'steps' has dtype torch.int64.*\(R14\)"):
        st.layout_from_module(net, units)

    net = Net()
    net.register_buffer("count", torch.zeros(1, dtype=torch.int32))
    assert "count" not in str(st.layout_from_module(net, units))  # buffers stay with the trainer
    with pytest.raises(ValueError, match=r"'count' has dtype torch.int32.*\(R14\)"):
        st.layout_from_module(net, units, include_buffers=True)
    del net.count
    with_buffers = st.layout_from_module(net, units, include_buffers=True)
    assert {"fqn": "scale", "shape": [3], "dtype": "float32"} in with_buffers["units"][0]["params"]

    with pytest.raises(ValueError, match="mixes float32 and bfloat16"):
        st.layout_from_module(Net())  # no units: the bf16 blocks fall into the root
    with pytest.raises(ValueError, match="no module"):
        st.layout_from_module(Net(), ["nosuch"])
    with pytest.raises(ValueError, match="not part of the model"):
        st.layout_from_module(Net(), [torch.nn.Linear(1, 1)])


def test_layout_refuses_a_tie_whose_primary_comes_in_a_later_unit() -> None:
    net = Net()
    net.head.weight = net.blocks[1].fc.weight  # named after the blocks, yet in the root
    with pytest.raises(ValueError, match="'head.weight' .unit ''. is tied to "
                                         "'blocks.1.fc.weight' of unit 'blocks.1'"):
        st.layout_from_module(net, ["blocks.0", "blocks.1"])


def test_register_fills_shards_from_the_module(client: summon.Client) -> None:
    net = Net()
    model = st.register(client, "net", net, ["blocks", "blocks.0", "blocks.1"])
    assert model.state == "READY" and model.world_size == 2
    assert [(u.fqn, u.chunk_numel) for u in model.units][:2] == [("", 28), ("blocks", 0)]
    params = dict(net.named_parameters())
    with client.summon_full_params("net", writeback=False) as s:
        assert s.keys() == list(params)
        for fqn, param in params.items():
            if param.dtype == torch.bfloat16:
                assert torch.equal(s.torch(fqn), param.detach()), fqn
            else:
                np.testing.assert_array_equal(s[fqn], param.detach().numpy(), err_msg=fqn)


def test_shard_views_are_the_shards(client: summon.Client) -> None:
    net = Net()
    st.register(client, "net", net, ["blocks", "blocks.0", "blocks.1"])
    views = [st.ShardViews(client.map_shards("net", rank)) for rank in (0, 1)]
    assert [v.rank for v in views] == [0, 1]
    empty = views[0]["blocks"]
    assert empty.params.numel() == 0 and empty.grads.numel() == 0 and empty.param_views == {}
    for unit in ("", "blocks.0", "blocks.1"):
        first, second = views[0][unit], views[1][unit]
        assert first.params.dtype == first.dtype == second.grads.dtype
        assert first.shard.shard_flat_offset == 0
        assert second.shard.shard_flat_offset == first.shard.chunk_numel
        assert torch.count_nonzero(first.grads) == 0  # gradient shards start at zero
        # The gathered flat parameter rebuilds every tensor, tied names included.
        full = first.unflatten(torch.cat([first.params, second.params]))
        for fqn, tensor in full.items():
            expected = dict(st.named_parameters_with_ties(net))[fqn].detach()
            assert torch.equal(tensor, expected), fqn
        # Per-parameter views are the owned slices.
        for part in second.shard.params:
            flat = dict(net.named_parameters())[part.info.fqn].detach().reshape(-1)
            window = flat[part.element_offset:part.element_offset + part.numel]
            assert torch.equal(second.param_views[part.info.fqn], window)
    assert "head.weight" in views[0][""].unflatten(
        torch.cat([views[0][""].params, views[1][""].params]))

    # Writing a view writes the model: a session sees it at once.
    views[1]["blocks.0"].param_views["blocks.0.fc.bias"].fill_(0.5)
    with client.summon_full_params("net", params=["blocks.0.fc.bias"], writeback=False) as s:
        bias = s.torch("blocks.0.fc.bias")
    assert bias.dtype == torch.bfloat16
    owned = views[1]["blocks.0"].shard.params[-1]
    assert owned.info.fqn == "blocks.0.fc.bias"
    assert torch.all(bias[owned.element_offset:] == 0.5)
    assert torch.equal(bias[:owned.element_offset], net.blocks[0].fc.bias.detach()[
        :owned.element_offset])


def test_bfloat16_wire_bits_match_torch(client: summon.Client) -> None:
    net = Net()
    st.register(client, "net", net, ["blocks.0", "blocks.1"])
    with client.summon_full_params("net", scope="blocks.0", writeback=False) as s:
        bits = s.read("blocks.0.fc.weight", raw=True)
    expected = net.blocks[0].fc.weight.detach().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits, expected)
    np.testing.assert_array_equal(dtypes.bfloat16_to_float32(bits),
                                  net.blocks[0].fc.weight.detach().float().numpy())
