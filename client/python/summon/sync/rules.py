"""Sync plans generated from a Hugging Face config: vLLM's tensor-parallel rules.

The rules are those of vLLM 0.33's parallel layers (model_executor/layers/
linear.py, vocab_parallel_embedding.py, fused_moe/) as its LlamaForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM build and load
them; tests/weight_sync holds every generated plan against vLLM's own
load_weights, bit for bit:

- ColumnParallelLinear (q/k/v, gate/up, their biases): dim 0 split in equal
  contiguous blocks, block r on rank r.
- QKVParallelLinear: qkv_proj = cat(q block r, k block, v block); when TP
  exceeds the KV heads each KV head is replicated on TP / kv_heads ranks and
  rank r holds KV head r // (TP / kv_heads) whole.
- MergedColumnParallelLinear: gate_up_proj = cat(gate block r, up block r).
- RowParallelLinear (o_proj, down_proj): dim 1 split (a strided box); a bias
  is whole on every rank.
- VocabParallelEmbedding / ParallelLMHead: the vocabulary padded to a
  multiple of 64, split in contiguous ranges, the padding rows zero.
- FusedMoE at TP (no expert parallelism): w13_weight (E, 2 I/TP, H) =
  cat(gate rows block r, up rows block r) of every expert, w2_weight
  (E, H, I/TP) the column block r of down_proj; the router whole.
- Norms (Qwen3's q_norm/k_norm included) whole on every rank.

Trainer names are transformers 5's: its Qwen3-MoE holds the experts fused
and stacked (mlp.experts.gate_up_proj (E, 2 I, H), mlp.experts.down_proj
(E, H, I)).
"""

from __future__ import annotations

from typing import Any, Optional

from summon.sync.plan import Entry, Piece, SyncPlan

VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe")

_DTYPE_NAMES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
                "float64": "float64", "float": "float32", "half": "float16",
                "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def _dtype_name(value: Any) -> str:
    text = str(value).removeprefix("torch.")
    try:
        return _DTYPE_NAMES[text]
    except KeyError:
        raise ValueError(f"dtype {value!r}: a sync plan's dtypes are "
                         "float32, bfloat16, float16, float64") from None


def _split(total: int, tp_size: int, what: str) -> int:
    if total % tp_size:
        raise ValueError(f"{what} ({total}) is not divisible by tp_size {tp_size}")
    return total // tp_size


def pad_vocab(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    """vLLM's pad_vocab_size: rounded up to a multiple of `pad_to`."""
    return (vocab_size + pad_to - 1) // pad_to * pad_to


class _Builder:
    """Collects one rank's entries and the sources' shapes."""

    def __init__(self, tp_size: int, rank: int, dtype: str,
                 sources: dict[str, tuple[int, ...]]) -> None:
        self.tp, self.rank, self.dtype, self.sources = tp_size, rank, dtype, sources
        self.entries: list[Entry] = []

    def source(self, fqn: str, shape: tuple[int, ...]) -> str:
        """Records `fqn`'s shape; returns `fqn`."""
        self.sources[fqn] = shape
        return fqn

    def box(self, fqn: str, dim: int, start: int, length: int) -> Piece:
        """`fqn`'s box that is [start, start+length) in `dim`, whole elsewhere."""
        shape = self.sources[fqn]
        return Piece(fqn, tuple((start, length) if d == dim else (0, n)
                                for d, n in enumerate(shape)))

    def add(self, engine_name: str, pieces: list[Piece], cat_dim: int = 0,
            pad_rows: int = 0) -> None:
        shape = list(pieces[0].shape) if pieces else []
        if pieces:
            shape[cat_dim] = sum(p.shape[cat_dim] for p in pieces)
        shape[0] += pad_rows
        self.entries.append(Entry(engine_name, tuple(pieces), tuple(shape), self.dtype,
                                  cat_dim=cat_dim, pad_rows=pad_rows))

    def whole(self, engine_name: str, fqn: str, shape: tuple[int, ...]) -> None:
        self.source(fqn, shape)
        self.add(engine_name, [Piece(fqn, tuple((0, n) for n in shape))])

    def column(self, fqn: str, shape: tuple[int, ...], dim: int = 0) -> Piece:
        """Block `rank` of `fqn` split along `dim` (a column-parallel output)."""
        self.source(fqn, shape)
        block = _split(shape[dim], self.tp, f"{fqn} dim {dim}")
        return self.box(fqn, dim, self.rank * block, block)

    def vocab(self, engine_name: str, fqn: str, vocab_size: int, hidden: int) -> None:
        """VocabParallelEmbedding / ParallelLMHead: padded vocabulary, contiguous
        ranges, zero padding rows."""
        self.source(fqn, (vocab_size, hidden))
        per_rank = pad_vocab(vocab_size) // self.tp
        start = self.rank * per_rank
        real = max(0, min(start + per_rank, vocab_size) - start)
        pieces = [self.box(fqn, 0, start, real)] if real else []
        if not pieces:  # a rank holding only padding: the shape comes from here
            self.entries.append(Entry(engine_name, (), (per_rank, hidden), self.dtype,
                                      pad_rows=per_rank))
            return
        self.add(engine_name, pieces, pad_rows=per_rank - real)


def _attention(b: _Builder, cfg: Any, p: str, family: str) -> None:
    hidden = _get(cfg, "hidden_size")
    heads = _get(cfg, "num_attention_heads")
    kv_heads = _get(cfg, "num_key_value_heads") or heads
    head_dim = _get(cfg, "head_dim") or hidden // heads
    tp, rank = b.tp, b.rank
    _split(heads, tp, "num_attention_heads")
    if kv_heads >= tp:
        kv_per_rank = _split(kv_heads, tp, "num_key_value_heads")
        kv_start = rank * kv_per_rank
    else:
        replicas = _split(tp, kv_heads, "tp_size over num_key_value_heads")
        kv_per_rank, kv_start = 1, rank // replicas
    q_rows, kv_rows = heads * head_dim, kv_heads * head_dim
    bias = family == "qwen2" or bool(_get(cfg, "attention_bias", False))
    kinds = ["weight", "bias"] if bias else ["weight"]
    for kind in kinds:
        tail = (hidden,) if kind == "weight" else ()
        q = b.column(f"{p}.self_attn.q_proj.{kind}", (q_rows,) + tail)
        pieces = [q]
        for name in ("k_proj", "v_proj"):
            fqn = b.source(f"{p}.self_attn.{name}.{kind}", (kv_rows,) + tail)
            pieces.append(b.box(fqn, 0, kv_start * head_dim, kv_per_rank * head_dim))
        b.add(f"{p}.self_attn.qkv_proj.{kind}", pieces)
    b.add(f"{p}.self_attn.o_proj.weight",
          [b.column(f"{p}.self_attn.o_proj.weight", (hidden, q_rows), dim=1)], cat_dim=1)
    if bias and family == "llama":  # RowParallelLinear's bias: whole
        b.whole(f"{p}.self_attn.o_proj.bias", f"{p}.self_attn.o_proj.bias", (hidden,))
    if family in ("qwen3", "qwen3_moe"):
        for norm in ("q_norm", "k_norm"):
            b.whole(f"{p}.self_attn.{norm}.weight", f"{p}.self_attn.{norm}.weight",
                    (head_dim,))


def _dense_mlp(b: _Builder, p: str, hidden: int, inter: int) -> None:
    gate = b.column(f"{p}.mlp.gate_proj.weight", (inter, hidden))
    up = b.column(f"{p}.mlp.up_proj.weight", (inter, hidden))
    b.add(f"{p}.mlp.gate_up_proj.weight", [gate, up])
    b.add(f"{p}.mlp.down_proj.weight",
          [b.column(f"{p}.mlp.down_proj.weight", (hidden, inter), dim=1)], cat_dim=1)


def _moe_mlp(b: _Builder, p: str, hidden: int, experts: int, inter: int,
             experts_name: str) -> None:
    gate_up = b.source(f"{p}.mlp.experts.gate_up_proj", (experts, 2 * inter, hidden))
    block = _split(inter, b.tp, f"{p} moe_intermediate_size")
    start = b.rank * block
    b.add(f"{p}.mlp.{experts_name}.w13_weight",
          [b.box(gate_up, 1, start, block), b.box(gate_up, 1, inter + start, block)],
          cat_dim=1)
    b.add(f"{p}.mlp.{experts_name}.w2_weight",
          [b.column(f"{p}.mlp.experts.down_proj", (experts, hidden, inter), dim=2)],
          cat_dim=2)
    b.whole(f"{p}.mlp.gate.weight", f"{p}.mlp.gate.weight", (experts, hidden))


# Where vLLM 0.33 keeps a FusedMoE layer's stacked experts, relative to mlp.
MOE_EXPERTS_NAME = "experts.routed_experts"


def plan_for(hf_config: Any, tp_size: int, dtype: Optional[str] = None,
             experts_name: str = MOE_EXPERTS_NAME) -> SyncPlan:
    """The sync plan of a Llama / Mistral / Qwen2 / Qwen3 / Qwen3-MoE model
    (a transformers config or its dict) for vLLM at tensor parallelism
    `tp_size`; `dtype` is the engine's (default: the config's)."""
    cfg = _get(hf_config, "text_config", None) or hf_config
    family = _get(cfg, "model_type")
    if family not in FAMILIES:
        raise ValueError(f"plan_for: model_type {family!r} has no generated plan "
                         f"(families: {', '.join(FAMILIES)}); write the plan by hand "
                         "(summon.sync.SyncPlan)")
    if family == "mistral":
        family = "llama"
    if tp_size < 1:
        raise ValueError(f"tp_size {tp_size} < 1")
    dtype = _dtype_name(dtype or _get(cfg, "dtype", None) or _get(cfg, "torch_dtype", None)
                        or "float32")
    hidden = _get(cfg, "hidden_size")
    vocab = _get(cfg, "vocab_size")
    tied = bool(_get(cfg, "tie_word_embeddings", False))
    if family == "llama" and _get(cfg, "mlp_bias", False):
        raise ValueError("plan_for: Llama with mlp_bias has no generated plan yet")
    sources: dict[str, tuple[int, ...]] = {}
    ranks = []
    for rank in range(tp_size):
        b = _Builder(tp_size, rank, dtype, sources)
        b.vocab("model.embed_tokens.weight", "model.embed_tokens.weight", vocab, hidden)
        for layer in range(_get(cfg, "num_hidden_layers")):
            p = f"model.layers.{layer}"
            _attention(b, cfg, p, family)
            if family == "qwen3_moe" and _is_moe_layer(cfg, layer):
                _moe_mlp(b, p, hidden, _get(cfg, "num_experts"),
                         _get(cfg, "moe_intermediate_size"), experts_name)
            else:
                _dense_mlp(b, p, hidden, _get(cfg, "intermediate_size"))
            for norm in ("input_layernorm", "post_attention_layernorm"):
                b.whole(f"{p}.{norm}.weight", f"{p}.{norm}.weight", (hidden,))
        b.whole("model.norm.weight", "model.norm.weight", (hidden,))
        if not tied:  # tied: vLLM's lm_head is embed_tokens (one parameter)
            b.vocab("lm_head.weight", "lm_head.weight", vocab, hidden)
        ranks.append(tuple(b.entries))
    return SyncPlan(tp_size=tp_size, ranks=tuple(ranks), sources=sources,
                    description=f"{family} for vLLM TP={tp_size}, {dtype}")


def _is_moe_layer(cfg: Any, layer: int) -> bool:
    """Qwen3MoeDecoderLayer's test: sparse unless listed in mlp_only_layers."""
    mlp_only = _get(cfg, "mlp_only_layers", None) or []
    step = _get(cfg, "decoder_sparse_step", 1) or 1
    return (layer not in mlp_only and _get(cfg, "num_experts", 0) > 0
            and (layer + 1) % step == 0)
