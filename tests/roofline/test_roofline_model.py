"""Model shapes from config.json: the three architectures counted by hand, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.roofline import model_from_json, read_model_config

DATA = Path(__file__).parents[2] / "examples" / "models"   # model configs shipped as examples


def load(name: str) -> dict[str, object]:
    out: dict[str, object] = json.loads((DATA / name).read_text())
    return out


def test_dense_gqa_counted_by_hand() -> None:
    m = read_model_config(DATA / "dense_gqa_llama.json")
    assert (m.attention, m.heads, m.kv_heads, m.head_dim) == ("gqa", 32, 8, 128)   # head_dim = 4096 / 32
    # q and o: 4096 x (32 x 128) each; k and v: 4096 x (8 x 128) each
    assert m.attn_params == 2 * 16_777_216 + 2 * 4_194_304 == 41_943_040
    assert m.dense_mlp_params == 3 * 4096 * 14336 == 176_160_768          # gate, up, down
    assert (m.dense_layers, m.moe_layers) == (32, 0)
    assert m.kv_elems == 2 * 8 * 128                                       # K and V of 8 heads
    assert m.decode_attn_flops == m.prefill_attn_flops == 4 * 32 * 128     # q.k and p.v, 2 FLOPs each
    # 32 x (41,943,040 + 176,160,768) + 2 x 128,256 x 4,096 (untied embeddings and head)
    assert m.total_params == 32 * 218_103_808 + 2 * 525_336_576 == 8_029_995_008
    assert m.config_dtype == "bf16"


def test_moe_with_shared_experts_counted_by_hand() -> None:
    m = read_model_config(DATA / "moe_shared_qwen2moe.json")
    assert (m.experts, m.top_k, m.expert_ffn, m.shared_ffn) == (60, 4, 1408, 5632)
    assert (m.dense_layers, m.moe_layers) == (0, 24)                       # decoder_sparse_step 1, no mlp_only
    assert m.expert_params == 3 * 2048 * 1408 == 8_650_752
    assert m.shared_params == 3 * 2048 * 5632 == 34_603_008
    assert m.attn_params == 4 * 2048 * 2048                                # 16 heads of 128, 16 KV heads
    per_layer = 16_777_216 + 60 * 8_650_752 + 34_603_008
    assert m.total_params == 24 * per_layer + 2 * 151_936 * 2048 == 14_312_538_112
    # one token: attention, shared expert and 4 routed experts per layer, plus the head
    assert m.active_block_params + m.head_params == 24 * (16_777_216 + 34_603_008 + 4 * 8_650_752) + 311_164_928


def test_mla_counted_by_hand() -> None:
    m = read_model_config(DATA / "mla_deepseek_v3.json")
    assert (m.attention, m.kv_heads) == ("mla", 1)
    q = 7168 * 1536 + 1536 * 128 * (128 + 64)          # q_a, q_b
    kv = 7168 * (512 + 64) + 512 * 128 * (128 + 128)    # kv_a (latent + rope key), kv_b (keys and values)
    o = 128 * 128 * 7168
    assert m.attn_params == q + kv + o == 187_105_280
    assert m.kv_elems == 512 + 64                       # the latent and the shared rope key
    assert m.decode_attn_flops == 2 * 128 * (512 + 64) + 2 * 128 * 512
    assert m.prefill_attn_flops == 2 * 128 * (128 + 64) + 2 * 128 * 128
    assert (m.dense_layers, m.moe_layers, m.dense_ffn) == (3, 58, 18432)   # first_k_dense_replace 3
    assert (m.experts, m.top_k, m.expert_ffn, m.shared_ffn) == (256, 8, 2048, 2048)
    assert round(m.total_params / 1e9) == 671
    assert m.config_dtype == "fp8"


def test_mixtral_style_experts_use_intermediate_size() -> None:
    m = read_model_config(DATA / "gqa_moe_230b.json")
    assert (m.experts, m.top_k, m.expert_ffn, m.shared_ffn, m.moe_layers) == (256, 8, 1536, 0, 62)
    assert round(m.total_params / 1e9) == 229 and round((m.active_block_params + m.head_params) / 1e9) == 10


def test_a_directory_and_a_nested_text_config(tmp_path: Path) -> None:
    wrapped = {"model_type": "llava", "text_config": load("dense_gqa_llama.json")}
    (tmp_path / "config.json").write_text(json.dumps(wrapped))
    assert read_model_config(tmp_path).total_params == 8_029_995_008


def test_sliding_window_layers_are_counted() -> None:
    config = load("dense_gqa_llama.json") | {"layer_types": ["sliding_attention", "full_attention"] * 16,
                                              "sliding_window": 4096}
    m = model_from_json(json.dumps(config).encode())
    assert (m.window_layers, m.window) == (16, 4096)


REQUIRED = {
    "dense_gqa_llama.json": ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
                             "intermediate_size"],
    "moe_shared_qwen2moe.json": ["num_experts_per_tok", "moe_intermediate_size"],
    "mla_deepseek_v3.json": ["qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "moe_intermediate_size",
                             "intermediate_size"],
}


@pytest.mark.parametrize(("name", "field"), [(n, f) for n, fields in REQUIRED.items() for f in fields])
def test_a_missing_field_is_named_in_one_line(name: str, field: str) -> None:
    config = load(name)
    del config[field]
    with pytest.raises(ConfigError) as info:
        model_from_json(json.dumps(config).encode(), name)
    message = str(info.value)
    assert f'missing "{field}"' in message and name in message and "\n" not in message


def test_a_mistyped_field_is_named() -> None:
    config = load("dense_gqa_llama.json") | {"hidden_size": "4096"}
    with pytest.raises(ConfigError, match='field "hidden_size" has the wrong type'):
        model_from_json(json.dumps(config).encode())


@pytest.mark.parametrize(("patch", "message"), [
    ({"num_key_value_heads": 5}, "not a multiple"),
    ({"num_hidden_layers": 0}, '"num_hidden_layers" must be >= 1'),
    ({"layer_types": ["sliding_attention"] * 32}, 'missing "sliding_window"'),
])
def test_inconsistent_configs(patch: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        model_from_json(json.dumps(load("dense_gqa_llama.json") | patch).encode())


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model config"):
        read_model_config(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a JSON object"):
        read_model_config(tmp_path / "bad.json")
