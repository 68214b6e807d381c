"""The judge's small models: Hugging Face configs of the Llama, Qwen2, Qwen3
and Qwen3-MoE families, shaped so each vLLM rule is exercised at TP = 1, 2, 4:
2 KV heads (split at TP 2, replicated at TP 4), a vocabulary of 150 (padded
to 192: the last rank at TP 4 holds 6 real rows and 42 zero rows), Qwen3's
head_dim (24) unlike hidden / heads, a tied Qwen3, Qwen2's qkv biases, a
Qwen3-MoE with one sparse and one dense (mlp_only_layers) layer, and random
weights from a seed (no hub)."""

from __future__ import annotations

from typing import Any

import torch

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=150, max_position_embeddings=256,
              rms_norm_eps=1e-6, intermediate_size=96)

CONFIGS: dict[str, dict[str, Any]] = {
    "llama": dict(COMMON, model_type="llama", architectures=["LlamaForCausalLM"],
                  tie_word_embeddings=False),
    "qwen2": dict(COMMON, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                  tie_word_embeddings=False),
    "qwen3_tied": dict(COMMON, model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                       head_dim=24, tie_word_embeddings=True),
    "qwen3_moe": dict(COMMON, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                      head_dim=16, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[1],
                      tie_word_embeddings=False, norm_topk_prob=True),
}

# (config, engine dtype, trainer dtype): fp32 everywhere, and a bf16 engine
# fed by fp32 (master) weights or by bf16 weights.
CASES = [
    ("llama", "float32", "float32"),
    ("llama", "bfloat16", "float32"),
    ("qwen2", "float32", "float32"),
    ("qwen2", "bfloat16", "bfloat16"),
    ("qwen3_tied", "float32", "float32"),
    ("qwen3_tied", "bfloat16", "float32"),
    ("qwen3_moe", "float32", "float32"),
    ("qwen3_moe", "bfloat16", "bfloat16"),
]


# Only when named (test_vllm_pull_summond.py): examples/rl_weight_sync.py's
# Llama, trained and published through summond, bf16 engine from fp32 weights.
SERVER_CASES = [("rl_example", "bfloat16", "float32")]


def _example_config() -> dict[str, Any]:
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "rl_weight_sync.py"
    spec = importlib.util.spec_from_file_location("rl_weight_sync", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.CONFIG, architectures=["LlamaForCausalLM"])


def hf_config(name: str):
    from transformers import AutoConfig
    spec = dict(_example_config() if name == "rl_example" else CONFIGS[name])
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


def random_state_dict(name: str, dtype: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """The HF model's names and shapes, every tensor random (norms too, so a
    swapped or misplaced norm shows)."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(name))
    generator = torch.Generator().manual_seed(seed)
    return {k: torch.randn(tuple(v.shape), generator=generator).to(getattr(torch, dtype))
            for k, v in model.state_dict().items()}
