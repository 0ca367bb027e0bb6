"""A model's shape from its Hugging Face ``config.json``: what the roofline needs, nothing more.

``read_model_config(path)`` decodes the file into ``HfConfig`` (every field optional, unknown fields
ignored) and derives a ``ModelShape``: per-layer parameter counts, KV-cache elements per token and
attention FLOPs per context token. The field names are the ones the architectures use:

* every model: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
  ``intermediate_size`` (the dense MLP; the expert MLP in Mixtral-style configs),
  ``num_key_value_heads`` (GQA; absent means one KV head per attention head, as in Hugging Face),
  ``head_dim`` (absent: ``hidden_size / num_attention_heads``), ``tie_word_embeddings``.
* MoE: the expert count is ``n_routed_experts`` (DeepSeek, GLM), ``num_experts`` (Qwen) or
  ``num_local_experts`` (Mixtral, MiniMax, gpt-oss); experts per token ``num_experts_per_tok``
  (or ``experts_per_token`` / ``num_experts_per_token``); the expert MLP ``moe_intermediate_size``
  (``intermediate_size`` in Mixtral-style configs, those counting ``num_local_experts``). Shared
  experts: ``n_shared_experts`` / ``num_shared_experts`` times the expert MLP, or
  ``shared_expert_intermediate_size`` (Qwen2-MoE). Which layers are dense:
  ``first_k_dense_replace`` and ``moe_layer_freq`` (DeepSeek, GLM), ``decoder_sparse_step`` and
  ``mlp_only_layers`` (Qwen).
* MLA (DeepSeek V2/V3, Kimi K2): ``kv_lora_rank``, ``q_lora_rank`` (null: no query compression),
  ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``. The KV cache holds the latent
  (``kv_lora_rank + qk_rope_head_dim`` per token and layer), the same on every tensor-parallel rank.
* sliding windows: ``layer_types`` (``"sliding_attention"``) with ``sliding_window``.
* weight dtype: ``quantization_config.quant_method`` (``fp8``, ``mxfp4``) or ``quant_algo``
  (``NVFP4``), else ``torch_dtype`` / ``dtype``.
* multimodal wrappers: the text model's fields under ``text_config``.

Every MLP counts as gated (three matrices: gate, up, down), as in all the architectures above;
biases, norms and routers are left out (under 0.1 % of the weights). A missing or mistyped field is
a one-line ``ConfigError`` that names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError

Dtype = Literal["fp4", "fp8", "bf16", "fp16"]
Attention = Literal["gqa", "mla"]


class QuantConfig(msgspec.Struct, kw_only=True):
    quant_method: str | None = None
    quant_algo: str | None = None


class HfConfig(msgspec.Struct, kw_only=True):
    """The fields of a Hugging Face ``config.json`` the roofline reads (all optional here)."""

    model_type: str | None = None
    architectures: list[str] | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool | None = None
    n_routed_experts: int | None = None
    num_experts: int | None = None
    num_local_experts: int | None = None
    num_experts_per_tok: int | None = None
    experts_per_token: int | None = None
    num_experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    n_shared_experts: int | None = None
    num_shared_experts: int | None = None
    shared_expert_intermediate_size: int | None = None
    first_k_dense_replace: int | None = None
    moe_layer_freq: int | None = None
    decoder_sparse_step: int | None = None
    mlp_only_layers: list[int] | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    layer_types: list[str] | None = None
    sliding_window: int | None = None
    torch_dtype: str | None = None
    dtype: str | None = None
    quantization_config: QuantConfig | None = None
    text_config: HfConfig | None = None


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """What the roofline needs of a model; parameter counts are per layer unless named otherwise."""

    name: str
    layers: int
    hidden: int
    vocab: int
    tied_embeddings: bool
    attention: Attention
    heads: int
    kv_heads: int                  # GQA: KV heads; MLA: 1 (the latent is shared by all heads)
    head_dim: int
    attn_params: int               # q, k, v and output projections of one layer
    kv_elems: int                  # KV-cache elements per token per layer (all KV heads / the latent)
    decode_attn_flops: int         # attention FLOPs per query token per context token per layer
    prefill_attn_flops: int
    dense_layers: int
    dense_ffn: int
    moe_layers: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int                # all shared experts of a MoE layer together (0: none)
    window_layers: int = 0         # layers with sliding-window attention
    window: int = 0
    config_dtype: Dtype | None = None

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.expert_ffn

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.dense_ffn

    @property
    def shared_params(self) -> int:
        return 3 * self.hidden * self.shared_ffn

    @property
    def head_params(self) -> int:
        """The output projection (lm_head): vocab x hidden."""
        return self.vocab * self.hidden

    @property
    def block_params(self) -> int:
        """Every transformer-block weight (attention, MLPs, all experts), without embeddings."""
        return (self.layers * self.attn_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (self.experts * self.expert_params + self.shared_params))

    @property
    def total_params(self) -> int:
        return self.block_params + self.head_params * (1 if self.tied_embeddings else 2)

    @property
    def active_block_params(self) -> int:
        """Block weights one token multiplies: attention, dense MLPs, shared and its k experts."""
        return (self.layers * self.attn_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (self.top_k * self.expert_params + self.shared_params))

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0


def read_model_config(path: Path) -> ModelShape:
    """The shape of the model whose ``config.json`` is ``path`` (or is in the directory ``path``)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read model config {file}: {exc.strerror or exc}") from None
    return model_from_json(data, str(file))


def model_from_json(data: bytes, where: str = "model config") -> ModelShape:
    try:
        config = msgspec.json.decode(data, type=HfConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {_field_error(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{where}: not a JSON object ({exc})") from None
    if config.num_hidden_layers is None and config.text_config is not None:
        config = config.text_config
    return model_from_config(config, where)


def _field_error(message: str) -> str:
    """msgspec's 'Expected `int`, got `str` - at `$.hidden_size`' as 'field "hidden_size": ...'."""
    text, sep, at = message.partition(" - at `$.")
    if not sep:
        return message
    return f'field "{at.rstrip("`")}" has the wrong type ({text.lower()})'


def _need(value: int | None, field: str, what: str, where: str) -> int:
    if value is None:
        raise ConfigError(f'{where}: missing "{field}" ({what})')
    if value < 1:
        raise ConfigError(f'{where}: "{field}" must be >= 1 (got {value})')
    return value


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def model_from_config(c: HfConfig, where: str = "model config") -> ModelShape:
    """Derive the shape; ``where`` names the file in errors."""
    layers = _need(c.num_hidden_layers, "num_hidden_layers", "the number of transformer layers", where)
    hidden = _need(c.hidden_size, "hidden_size", "the model width", where)
    heads = _need(c.num_attention_heads, "num_attention_heads", "attention heads per layer", where)
    vocab = _need(c.vocab_size, "vocab_size", "the vocabulary size", where)
    attn = _mla(c, hidden, heads, where) if c.kv_lora_rank is not None else _gqa(c, hidden, heads, where)
    moe = _moe(c, layers, where)
    dense_ffn = 0
    if moe.dense_layers:
        dense_ffn = _need(c.intermediate_size, "intermediate_size", "the dense MLP width", where)
    window_layers = sum(1 for t in c.layer_types or [] if t == "sliding_attention")
    if window_layers and not c.sliding_window:
        raise ConfigError(f'{where}: missing "sliding_window" (layer_types has sliding_attention layers)')
    return ModelShape(
        name=_name(c), layers=layers, hidden=hidden, vocab=vocab,
        tied_embeddings=bool(c.tie_word_embeddings), heads=heads, dense_ffn=dense_ffn,
        window_layers=min(window_layers, layers), window=(c.sliding_window or 0) if window_layers else 0,
        config_dtype=_config_dtype(c), **msgspec.structs.asdict(attn), **msgspec.structs.asdict(moe))


class _Attn(msgspec.Struct, frozen=True):
    attention: Attention
    kv_heads: int
    head_dim: int
    attn_params: int
    kv_elems: int
    decode_attn_flops: int
    prefill_attn_flops: int


class _Moe(msgspec.Struct, frozen=True):
    dense_layers: int
    moe_layers: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int


def _gqa(c: HfConfig, hidden: int, heads: int, where: str) -> _Attn:
    kv_heads = _need(c.num_key_value_heads or heads, "num_key_value_heads", "KV heads", where)
    if heads % kv_heads:
        raise ConfigError(f'{where}: "num_attention_heads" ({heads}) is not a multiple of '
                          f'"num_key_value_heads" ({kv_heads})')
    head_dim = c.head_dim or hidden // heads
    params = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim   # q, o + k, v
    flops = 4 * heads * head_dim      # q.k and p.v: 2 FLOPs per multiply-add each
    return _Attn("gqa", kv_heads, head_dim, params, 2 * kv_heads * head_dim, flops, flops)


def _mla(c: HfConfig, hidden: int, heads: int, where: str) -> _Attn:
    rank = _need(c.kv_lora_rank, "kv_lora_rank", "the MLA latent width", where)
    rope = _need(c.qk_rope_head_dim, "qk_rope_head_dim", "MLA rotary head width", where)
    nope = _need(c.qk_nope_head_dim, "qk_nope_head_dim", "MLA non-rotary head width", where)
    v_dim = _need(c.v_head_dim, "v_head_dim", "MLA value head width", where)
    q_out = heads * (nope + rope)
    q = hidden * c.q_lora_rank + c.q_lora_rank * q_out if c.q_lora_rank else hidden * q_out
    params = q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
    # Decode reads the latent with the up-projections absorbed (q.k over rank + rope, p.v over rank);
    # prefill expands the latent into per-head keys and values (its cost is in the kv_b weights).
    decode = 2 * heads * (2 * rank + rope)
    prefill = 2 * heads * (nope + rope) + 2 * heads * v_dim
    return _Attn("mla", 1, nope + rope, params, rank + rope, decode, prefill)


def _moe(c: HfConfig, layers: int, where: str) -> _Moe:
    experts = _first(c.n_routed_experts, c.num_experts, c.num_local_experts)
    if experts is None or experts <= 1:
        return _Moe(layers, 0, 0, 0, 0, 0)
    top_k = _first(c.num_experts_per_tok, c.experts_per_token, c.num_experts_per_token)
    top_k = _need(top_k, "num_experts_per_tok", "experts each token is routed to", where)
    if top_k > experts:
        raise ConfigError(f'{where}: "num_experts_per_tok" ({top_k}) exceeds the {experts} experts')
    # Mixtral-style configs (num_local_experts) size the experts with intermediate_size; the others
    # keep intermediate_size for their dense layers and need moe_intermediate_size.
    mixtral = c.n_routed_experts is None and c.num_experts is None
    if c.moe_intermediate_size is not None or not mixtral:
        expert_ffn = _need(c.moe_intermediate_size, "moe_intermediate_size", "the expert MLP width", where)
    else:
        expert_ffn = _need(c.intermediate_size, "intermediate_size", "the expert MLP width", where)
    if c.shared_expert_intermediate_size is not None:
        shared = c.shared_expert_intermediate_size
    else:
        shared = (_first(c.n_shared_experts, c.num_shared_experts) or 0) * expert_ffn
    first_dense = c.first_k_dense_replace or 0
    freq = c.moe_layer_freq or 1
    step = c.decoder_sparse_step or 1
    dense_only = set(c.mlp_only_layers or [])
    moe_layers = sum(1 for i in range(layers)
                     if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only)
    return _Moe(layers - moe_layers, moe_layers, experts, top_k, expert_ffn, shared)


def _name(c: HfConfig) -> str:
    if c.architectures:
        return c.architectures[0]
    return c.model_type or "model"


def _config_dtype(c: HfConfig) -> Dtype | None:
    q = c.quantization_config
    if q is not None:
        method = (q.quant_method or "").lower()
        algo = (q.quant_algo or "").lower()
        if "fp4" in method or "fp4" in algo:
            return "fp4"
        if method == "fp8" or "fp8" in algo:
            return "fp8"
    torch_dtype = (c.torch_dtype or c.dtype or "").lower()
    if torch_dtype == "bfloat16":
        return "bf16"
    if torch_dtype == "float16":
        return "fp16"
    return None
