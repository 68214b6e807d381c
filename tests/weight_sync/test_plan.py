"""summon.sync's plans and pull, without vLLM: exact boxes of the generated
rules, the file form, hand-written plans, pull's assembly (through the test
reader, tests/weight_sync/full_state_test_reader.py) and the bad-input errors.
What vLLM itself holds is test_vllm_judge.py's."""

from __future__ import annotations

import pytest
import torch

import summon.sync
from summon.sync import Entry, Piece, SyncPlan
from full_state_test_reader import FullStateDictTestReader

LLAMA = dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=1, vocab_size=150, intermediate_size=96,
             tie_word_embeddings=False)


def entry(plan: SyncPlan, rank: int, name: str) -> Entry:
    return {e.engine_name: e for e in plan.entries(rank)}[name]


def test_llama_tp4_replicates_kv_heads_and_pads_the_vocabulary() -> None:
    plan = summon.sync.plan_for(LLAMA, 4, dtype="bfloat16")
    qkv = entry(plan, 3, "model.layers.0.self_attn.qkv_proj.weight")
    # q: heads 4 of 16 rows, block 3; 2 KV heads on 4 ranks: rank 3 holds KV head 1.
    assert [(p.fqn.rsplit(".", 2)[1], p.box) for p in qkv.pieces] == [
        ("q_proj", ((48, 16), (0, 64))), ("k_proj", ((16, 16), (0, 64))),
        ("v_proj", ((16, 16), (0, 64)))]
    assert qkv.shape == (48, 64) and qkv.dtype == "bfloat16"
    embed = entry(plan, 3, "model.embed_tokens.weight")  # 150 -> 192, 48 a rank
    assert embed.pieces == (Piece("model.embed_tokens.weight", ((144, 6), (0, 64))),)
    assert embed.pad_rows == 42 and embed.shape == (48, 64)
    o = entry(plan, 1, "model.layers.0.self_attn.o_proj.weight")
    assert o.pieces[0].box == ((0, 64), (16, 16)) and o.cat_dim == 1
    gate_up = entry(plan, 2, "model.layers.0.mlp.gate_up_proj.weight")
    assert [p.box for p in gate_up.pieces] == [((48, 24), (0, 64))] * 2
    assert entry(plan, 0, "model.norm.weight").pieces[0].box == ((0, 64),)


def test_tp2_splits_kv_heads_and_moe_experts() -> None:
    moe = dict(LLAMA, model_type="qwen3_moe", head_dim=16, num_experts=4,
               moe_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[])
    plan = summon.sync.plan_for(moe, 2)
    qkv = entry(plan, 1, "model.layers.0.self_attn.qkv_proj.weight")
    assert [p.box[0] for p in qkv.pieces] == [(32, 32), (16, 16), (16, 16)]
    w13 = entry(plan, 1, "model.layers.0.mlp.experts.routed_experts.w13_weight")
    assert [p.box for p in w13.pieces] == [((0, 4), (12, 12), (0, 64)),
                                           ((0, 4), (36, 12), (0, 64))]
    assert w13.cat_dim == 1 and w13.shape == (4, 24, 64)
    w2 = entry(plan, 1, "model.layers.0.mlp.experts.routed_experts.w2_weight")
    assert w2.pieces[0].box == ((0, 4), (0, 64), (12, 12)) and w2.shape == (4, 64, 12)
    assert plan.sources["model.layers.0.mlp.experts.gate_up_proj"] == (4, 48, 64)


def test_a_plan_file_is_the_same_plan(tmp_path) -> None:
    plan = summon.sync.plan_for(dict(LLAMA, model_type="qwen2"), 2, dtype="float32")
    plan.save(str(tmp_path / "plan.json"))
    assert SyncPlan.load(str(tmp_path / "plan.json")) == plan
    bias = entry(plan, 1, "model.layers.0.self_attn.qkv_proj.bias")
    assert [p.box for p in bias.pieces] == [((32, 32),), ((16, 16),), ((16, 16),)]


def hand_plan() -> SyncPlan:
    """fused = cat(a rows 1..2, b rows 0..0) + one zero row, on two ranks."""
    rank0 = (Entry("fused", (Piece("a", ((1, 2), (0, 3))), Piece("b", ((0, 1), (0, 3)))),
                   (4, 3), "float32", pad_rows=1),
             Entry("col", (Piece("a", ((0, 4), (2, 1))),), (4, 1), "bfloat16", cat_dim=1))
    rank1 = (Entry("fused", (), (2, 3), "float32", pad_rows=2),)
    return SyncPlan(2, (rank0, rank1), {"a": (4, 3), "b": (2, 3)}, "by hand")


def test_pull_assembles_a_hand_written_plan_exactly() -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(4, 3) + 0.5
    b = -torch.arange(6, dtype=torch.float32).reshape(2, 3)
    reader = FullStateDictTestReader({"a": a, "b": b})
    got = dict(summon.sync.pull(reader, "m", 7, hand_plan(), 0))
    want = torch.tensor([[3.5, 4.5, 5.5], [6.5, 7.5, 8.5], [0, -1, -2], [0, 0, 0]])
    assert torch.equal(got["fused"], want)
    assert got["col"].dtype == torch.bfloat16
    assert torch.equal(got["col"], a[:, 2:3].to(torch.bfloat16))
    # Only the boxes are read: 2*3 + 1*3 + 4*1 elements, nothing for the padding.
    assert reader.elements == 13 and reader.requests == 1
    assert torch.equal(dict(summon.sync.pull(reader, "m", 7, hand_plan(), 1))["fused"],
                       torch.zeros(2, 3))


def test_pull_batches_reads_by_bytes() -> None:
    plan = summon.sync.plan_for(LLAMA, 2)
    state = {k: torch.randn(s) for k, s in plan.sources.items()}
    reader = FullStateDictTestReader(state)
    pulled = dict(summon.sync.pull(reader, "m", 1, plan, 1, max_batch_bytes=32 << 10))
    # Rank 1's slice bytes in order: embed 13824 (54 real rows), qkv 16384 | o 8192,
    # gate_up 24576 | down 12288, three norms 768, lm_head 13824: three calls.
    assert reader.requests == 3
    for name, tensor in summon.sync.apply_plan(plan, 1, state):
        assert torch.equal(pulled[name], tensor)
    assert reader.elements * 4 == plan.slice_bytes(1, summon.sync.itemsize)


@pytest.mark.parametrize("make, message", [
    (lambda: SyncPlan(1, ((Entry("x", (Piece("a", ((3, 2), (0, 3))),), (2, 3), "float32"),),),
                      {"a": (4, 3)}), "x: box [(3, 2), (0, 3)] of a ends at 5 in dim 0"),
    (lambda: SyncPlan(1, ((Entry("x", (Piece("c", ((0, 1),)),), (1,), "float32"),),),
                      {"a": (4,)}), "source c is not among the plan's sources"),
    (lambda: Entry("x", (Piece("a", ((0, 2), (0, 3))),), (3, 3), "float32"),
     "x: pieces give 2 + 0 padding along dim 0, the parameter has 3"),
    (lambda: Entry("x", (Piece("a", ((0, 2), (0, 2))),), (2, 3), "float32"),
     "x: piece a box [(0, 2), (0, 2)] is 2 long in dim 1, the parameter 3"),
    (lambda: summon.sync.plan_for(dict(LLAMA, model_type="gpt2"), 1), "model_type 'gpt2'"),
    (lambda: summon.sync.plan_for(dict(LLAMA, num_key_value_heads=3), 2),
     "num_key_value_heads (3) is not divisible"),
    (lambda: SyncPlan.from_json('{"format": "other"}'), "not a sync plan"),
])
def test_bad_plans_are_refused_naming_the_entry(make, message: str) -> None:
    with pytest.raises(ValueError) as error:
        make()
    assert message in str(error.value)


def test_load_into_copies_by_name_and_names_what_is_wrong() -> None:
    model = torch.nn.Linear(3, 2, bias=True)
    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with pytest.raises(ValueError, match="covers no tensor for 1 engine parameter.*bias"):
        summon.sync.load_into(model, [("weight", weight)])
    assert torch.equal(model.weight, weight)  # copied before the coverage check
    assert summon.sync.load_into(model, [("weight", weight), ("bias", torch.ones(2))]) == {
        "weight", "bias"}
    with pytest.raises(KeyError, match="no parameter 'nope'"):
        summon.sync.load_into(model, [("nope", weight)])
    with pytest.raises(ValueError, match=r"bias: the engine holds \(2,\) torch.float32, "
                                          r"the plan gave \(3,\)"):
        summon.sync.load_into(model, [("bias", torch.ones(3))])
