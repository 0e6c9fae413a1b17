"""A seeded generator over each family's config space, for tests/test_random_configs_live.py.

`draw(family, rng)` gives the keyword arguments of the family's transformers config class: sizes, heads and
kv heads, head_dim, rope variants, windows and layer types, norms, tied or untied heads, biases, experts, the
encoder-decoder sides. Every draw is a config transformers 5.24 builds and runs and tracer claims to run
(what tracer refuses on purpose, e.g. gemma3's two-sided bidirectional windows, is left out).
"""

from __future__ import annotations

import numpy as np

VOCAB = 61  # odd on purpose: no size coincides with it

DECODERS = ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "opt", "qwen3", "olmo2", "starcoder2",
            "phi", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe")
ENCODERS = ("bert", "roberta")
SEQ2SEQ = ("t5", "bart")
FAMILIES = DECODERS + ENCODERS + SEQ2SEQ

CONFIG_CLASS = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
                "gemma": "GemmaConfig", "phi3": "Phi3Config", "gpt_neox": "GPTNeoXConfig", "opt": "OPTConfig",
                "qwen3": "Qwen3Config", "olmo2": "Olmo2Config", "starcoder2": "Starcoder2Config", "phi": "PhiConfig",
                "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig", "mixtral": "MixtralConfig",
                "qwen3_moe": "Qwen3MoeConfig", "qwen2_moe": "Qwen2MoeConfig", "bert": "BertConfig",
                "roberta": "RobertaConfig", "t5": "T5Config", "bart": "BartConfig"}


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _heads(rng, gqa: bool = True) -> tuple[int, int]:
    """(heads, kv heads): kv divides heads."""
    heads = _pick(rng, (1, 2, 3, 4, 6))
    kv = _pick(rng, [k for k in range(1, heads + 1) if heads % k == 0]) if gqa else heads
    return heads, kv


def _rope(rng, rotary_dim: int, kinds=("default", "linear", "dynamic", "yarn", "llama3", "longrope"),
          partial: float | None = None) -> tuple[dict, dict]:
    """(rope_parameters, extra top-level fields) for one rope variant."""
    kind = _pick(rng, kinds)
    rope = {"rope_type": kind, "rope_theta": float(_pick(rng, (100.0, 10000.0, 1e6)))}
    if partial is not None:
        rope["partial_rotary_factor"] = partial
    extra = {"max_position_embeddings": 64}
    if kind in ("linear", "dynamic"):
        rope["factor"] = float(_pick(rng, (2.0, 4.0)))
        if kind == "dynamic":
            extra["max_position_embeddings"] = int(_pick(rng, (8, 12, 64)))  # below the prompt: it rescales
    elif kind == "yarn":
        rope.update(factor=float(_pick(rng, (2.0, 4.0))), original_max_position_embeddings=16)
    elif kind == "llama3":
        rope.update(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
    elif kind == "longrope":
        half = rotary_dim // 2
        rope.update(short_factor=[float(x) for x in 1 + rng.random(half)],
                    long_factor=[float(x) for x in 1 + 4 * rng.random(half)], original_max_position_embeddings=8)
        extra["max_position_embeddings"] = 32
    return rope, extra


def _llama_like(rng, head_dim_free: bool = True, gqa: bool = True) -> dict:
    heads, kv = _heads(rng, gqa)
    d_head = 2 * int(rng.integers(2, 6))
    hidden = heads * (d_head if not head_dim_free or rng.random() < 0.5 else int(rng.integers(2, 11)))
    cfg = dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=int(rng.integers(8, 40)),
               num_hidden_layers=int(rng.integers(1, 4)), num_attention_heads=heads, num_key_value_heads=kv,
               rms_norm_eps=float(_pick(rng, (1e-6, 1e-5, 1e-2))), tie_word_embeddings=bool(rng.random() < 0.5))
    if hidden != heads * d_head:
        cfg["head_dim"] = d_head
    return cfg


def _window(rng) -> int:
    return int(rng.integers(1, 9))


def _layer_types(rng, n: int) -> list[str]:
    return [_pick(rng, ("full_attention", "sliding_attention")) for _ in range(n)]


def draw(family: str, rng: np.random.Generator) -> dict:
    """Config kwargs for one random tiny model of `family` (and "architectures" for the encoders)."""
    kwargs = _DRAW[family](rng)
    if family in DECODERS:  # the classes' defaults (llama: 32000) lie outside the tiny vocabulary
        kwargs.update(bos_token_id=0, pad_token_id=1, eos_token_id=2)
    return kwargs


def _gpt2(rng):
    heads, _ = _heads(rng, False)
    return dict(vocab_size=VOCAB, n_embd=heads * 2 * int(rng.integers(2, 6)), n_head=heads, n_layer=int(rng.integers(1, 4)),
                n_positions=48, n_inner=_pick(rng, (None, int(rng.integers(8, 40)))),
                activation_function=_pick(rng, ("gelu_new", "gelu", "relu", "gelu_pytorch_tanh")),
                layer_norm_epsilon=float(_pick(rng, (1e-5, 1e-2))), scale_attn_weights=bool(rng.random() < 0.8),
                tie_word_embeddings=bool(rng.random() < 0.5), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def _llama(rng):
    cfg = _llama_like(rng)
    d_head = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    rope, extra = _rope(rng, d_head)
    return dict(cfg, rope_parameters=rope, attention_bias=bool(rng.random() < 0.5), mlp_bias=bool(rng.random() < 0.5),
                hidden_act=_pick(rng, ("silu", "gelu", "gelu_pytorch_tanh", "relu")), **extra)


def _mistral(rng):
    return dict(_llama_like(rng), rope_parameters=_rope(rng, 0, ("default",))[0],
                sliding_window=_pick(rng, (None, _window(rng))))


def _qwen_window_fields(rng, n_layers: int) -> dict:
    fields = dict(use_sliding_window=bool(rng.random() < 0.7), sliding_window=_window(rng),
                  max_window_layers=int(rng.integers(0, n_layers + 1)))
    if rng.random() < 0.3:
        fields["layer_types"] = _layer_types(rng, n_layers)
        if not fields["use_sliding_window"] and "sliding_attention" in fields["layer_types"]:
            fields["use_sliding_window"] = True  # transformers fails on a sliding layer without a window
    return fields


def _qwen2(rng):
    cfg = _llama_like(rng, head_dim_free=False)
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default", "linear", "yarn"))[0],
                **_qwen_window_fields(rng, cfg["num_hidden_layers"]))


def _qwen3(rng):
    cfg = _llama_like(rng)
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default",))[0], attention_bias=bool(rng.random() < 0.5),
                **_qwen_window_fields(rng, cfg["num_hidden_layers"]))


def _gemma(rng):
    cfg = _llama_like(rng)
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default",))[0],
                hidden_activation=_pick(rng, ("gelu_pytorch_tanh", "gelu")), attention_bias=bool(rng.random() < 0.3))


def _gemma2_fields(rng, cfg: dict) -> dict:
    n = cfg["num_hidden_layers"]
    fields = dict(query_pre_attn_scalar=_pick(rng, (8, 24, 64)), sliding_window=_window(rng),
                  final_logit_softcapping=_pick(rng, (None, 3.0, 30.0)))
    if rng.random() < 0.5:
        fields["layer_types"] = _layer_types(rng, n)
    return fields


def _gemma2(rng):
    cfg = _gemma(rng)
    return dict(cfg, attn_logit_softcapping=_pick(rng, (None, 5.0, 50.0)), **_gemma2_fields(rng, cfg))


def _gemma3_text(rng):
    cfg = _gemma(rng)
    del cfg["rope_parameters"]
    full, _ = _rope(rng, cfg["head_dim"], ("default", "linear"))
    local = {"rope_type": "default", "rope_theta": 10000.0}
    fields = _gemma2_fields(rng, cfg)
    if "layer_types" not in fields and rng.random() < 0.5:
        fields["sliding_window_pattern"] = int(rng.integers(1, 4))
    if rng.random() < 0.2:  # EmbeddingGemma: both ways; tracer runs it only without sliding layers
        fields.update(use_bidirectional_attention=True, layer_types=["full_attention"] * cfg["num_hidden_layers"])
    return dict(cfg, rope_parameters={"full_attention": full, "sliding_attention": local}, **fields)


def _phi3(rng):
    cfg = _llama_like(rng, head_dim_free=False)
    d_head = cfg["hidden_size"] // cfg["num_attention_heads"]
    partial = _pick(rng, (1.0, 0.5)) if d_head % 4 == 0 else 1.0
    rope, extra = _rope(rng, int(d_head * partial), ("default", "longrope"), partial)
    return dict(cfg, rope_parameters=rope, sliding_window=_pick(rng, (None, _window(rng))), resid_pdrop=0.0,
                embd_pdrop=0.0, **extra)


def _gpt_neox(rng):
    heads, _ = _heads(rng, False)
    d_head = 4 * int(rng.integers(1, 4))
    partial = _pick(rng, (1.0, 0.5, 0.25)) if d_head % 8 == 0 else _pick(rng, (1.0, 0.5))
    kinds = ("default", "linear", "dynamic") if d_head * partial > 2 else ("default", "linear")  # dynamic: 2 dims divide by 0
    rope, extra = _rope(rng, int(d_head * partial), kinds, partial)
    return dict(vocab_size=VOCAB, hidden_size=heads * d_head, intermediate_size=int(rng.integers(8, 40)),
                num_hidden_layers=int(rng.integers(1, 4)), num_attention_heads=heads, rope_parameters=rope,
                use_parallel_residual=bool(rng.random() < 0.5), attention_bias=bool(rng.random() < 0.7),
                hidden_act=_pick(rng, ("gelu", "gelu_new", "relu")), layer_norm_eps=float(_pick(rng, (1e-5, 1e-2))),
                tie_word_embeddings=bool(rng.random() < 0.5), hidden_dropout=0.0, attention_dropout=0.0, **extra)


def _opt(rng):
    heads, _ = _heads(rng, False)
    hidden = heads * 2 * int(rng.integers(2, 6))
    return dict(vocab_size=VOCAB, hidden_size=hidden, ffn_dim=int(rng.integers(8, 40)), num_hidden_layers=int(rng.integers(1, 4)),
                num_attention_heads=heads, max_position_embeddings=48, do_layer_norm_before=bool(rng.random() < 0.7),
                word_embed_proj_dim=_pick(rng, (hidden, 8)), enable_bias=bool(rng.random() < 0.7),
                activation_function=_pick(rng, ("relu", "gelu")), tie_word_embeddings=bool(rng.random() < 0.5),
                dropout=0.0, attention_dropout=0.0)


def _olmo2(rng):
    return dict(_llama_like(rng, head_dim_free=False), rope_parameters=_rope(rng, 0, ("default", "linear"))[0],
                attention_bias=bool(rng.random() < 0.3))


def _starcoder2(rng):
    cfg = _llama_like(rng, head_dim_free=False)
    del cfg["rms_norm_eps"]
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default",))[0], sliding_window=_pick(rng, (None, _window(rng))),
                use_bias=bool(rng.random() < 0.7), norm_epsilon=float(_pick(rng, (1e-5, 1e-2))),
                hidden_act=_pick(rng, ("gelu_pytorch_tanh", "gelu")), residual_dropout=0.0, embedding_dropout=0.0)


def _phi(rng):
    heads, _ = _heads(rng, False)
    d_head = 4 * int(rng.integers(1, 4))
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": _pick(rng, (1.0, 0.5))}
    return dict(vocab_size=VOCAB, hidden_size=heads * d_head, intermediate_size=int(rng.integers(8, 40)),
                num_hidden_layers=int(rng.integers(1, 4)), num_attention_heads=heads, num_key_value_heads=heads,
                rope_parameters=rope, qk_layernorm=bool(rng.random() < 0.5), hidden_act=_pick(rng, ("gelu_new", "gelu")),
                layer_norm_eps=float(_pick(rng, (1e-5, 1e-2))), tie_word_embeddings=bool(rng.random() < 0.3),
                resid_pdrop=0.0, embd_pdrop=0.0)


def _mixtral(rng):
    experts = int(rng.integers(2, 6))
    return dict(_llama_like(rng), rope_parameters=_rope(rng, 0, ("default",))[0], num_local_experts=experts,
                num_experts_per_tok=int(rng.integers(1, experts + 1)), sliding_window=_pick(rng, (None, _window(rng))))


def _moe_fields(rng, n_layers: int) -> dict:
    experts = int(rng.integers(2, 6))
    fields = dict(num_experts=experts, num_experts_per_tok=int(rng.integers(1, experts + 1)),
                  moe_intermediate_size=int(rng.integers(4, 16)), norm_topk_prob=bool(rng.random() < 0.5),
                  decoder_sparse_step=int(rng.integers(1, 3)))
    if rng.random() < 0.3:
        fields["mlp_only_layers"] = [i for i in range(n_layers) if rng.random() < 0.5]
    return fields


def _qwen3_moe(rng):
    cfg = _llama_like(rng)
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default",))[0], use_sliding_window=bool(rng.random() < 0.5),
                sliding_window=_window(rng), **_moe_fields(rng, cfg["num_hidden_layers"]))


def _qwen2_moe(rng):
    cfg = _llama_like(rng, head_dim_free=False)
    return dict(cfg, rope_parameters=_rope(rng, 0, ("default",))[0], qkv_bias=bool(rng.random() < 0.7),
                shared_expert_intermediate_size=int(rng.integers(4, 16)), **_moe_fields(rng, cfg["num_hidden_layers"]),
                **_qwen_window_fields(rng, cfg["num_hidden_layers"]))


def _encoder(rng, family: str):
    heads, _ = _heads(rng, False)
    pad = 1 if family == "roberta" else 0
    cfg = dict(vocab_size=VOCAB, hidden_size=heads * 2 * int(rng.integers(2, 6)), num_hidden_layers=int(rng.integers(1, 4)),
               num_attention_heads=heads, intermediate_size=int(rng.integers(8, 40)),
               max_position_embeddings=48 + (pad + 1 if family == "roberta" else 0),
               type_vocab_size=int(rng.integers(1, 3)), hidden_act=_pick(rng, ("gelu", "gelu_new", "relu")),
               layer_norm_eps=float(_pick(rng, (1e-12, 1e-5, 1e-2))), tie_word_embeddings=bool(rng.random() < 0.5),
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=pad)
    cls = "RobertaForMaskedLM" if family == "roberta" else "BertForMaskedLM"
    cfg["architectures"] = [_pick(rng, (cls, cls.replace("ForMaskedLM", "Model")))]
    return cfg


def _t5(rng):
    heads, _ = _heads(rng, False)
    layers = int(rng.integers(1, 3))
    buckets = int(rng.integers(4, 17))
    return dict(vocab_size=VOCAB, d_model=int(rng.integers(4, 25)), d_kv=int(rng.integers(2, 9)), d_ff=int(rng.integers(8, 40)),
                num_layers=layers, num_decoder_layers=int(rng.integers(1, 4)), num_heads=heads,
                relative_attention_num_buckets=buckets, relative_attention_max_distance=int(rng.integers(buckets // 2 + 1, 40)),
                feed_forward_proj=_pick(rng, ("relu", "gated-gelu", "gated-silu", "gelu")),
                layer_norm_epsilon=float(_pick(rng, (1e-6, 1e-2))), tie_word_embeddings=bool(rng.random() < 0.5),
                dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)


def _bart(rng):
    d_head = 2 * int(rng.integers(1, 5))
    enc_heads, dec_heads = _heads(rng, False)[0], _heads(rng, False)[0]
    d = d_head * enc_heads * dec_heads if enc_heads * dec_heads <= 6 else d_head * 6
    return dict(vocab_size=VOCAB, d_model=d, encoder_layers=int(rng.integers(1, 3)), decoder_layers=int(rng.integers(1, 3)),
                encoder_attention_heads=enc_heads if d % enc_heads == 0 else 1,
                decoder_attention_heads=dec_heads if d % dec_heads == 0 else 1,
                encoder_ffn_dim=int(rng.integers(8, 40)), decoder_ffn_dim=int(rng.integers(8, 40)), max_position_embeddings=48,
                scale_embedding=bool(rng.random() < 0.5), activation_function=_pick(rng, ("gelu", "relu", "gelu_new")),
                tie_word_embeddings=bool(rng.random() < 0.5), dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)


_DRAW = {"gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "gemma": _gemma, "phi3": _phi3,
         "gpt_neox": _gpt_neox, "opt": _opt, "qwen3": _qwen3, "olmo2": _olmo2, "starcoder2": _starcoder2, "phi": _phi,
         "gemma2": _gemma2, "gemma3_text": _gemma3_text, "mixtral": _mixtral, "qwen3_moe": _qwen3_moe,
         "qwen2_moe": _qwen2_moe, "bert": lambda rng: _encoder(rng, "bert"),
         "roberta": lambda rng: _encoder(rng, "roberta"), "t5": _t5, "bart": _bart}


# ---------- a tiny random-weight model on disk, and its prompt ----------

INIT_STD = 0.2  # attention far from uniform
VECTOR_NOISE = 0.1  # every norm weight and bias moves off its neutral value


def build(family: str, kwargs: dict, folder, seed: int):
    """Save a random-weight transformers model of this config in `folder` (safetensors); returns its config."""
    import torch
    import transformers as tf

    from tracer.capture.hf import _eager_experts
    from tracer.capture.hf_routes import auto_class

    config = getattr(tf, CONFIG_CLASS[family])(**kwargs)
    torch.manual_seed(seed)
    model = auto_class(tf, config).from_config(config, attn_implementation="eager", **_eager_experts(config))
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.ndim == 1:
                param.add_(torch.randn(param.shape) * VECTOR_NOISE)
            else:
                param.normal_(0.0, INIT_STD)
        if family == "bart":
            model.final_logits_bias.add_(torch.randn(model.final_logits_bias.shape) * VECTOR_NOISE)
    model.save_pretrained(folder, safe_serialization=True)
    return config


def prompt(family: str, rng: np.random.Generator) -> dict:
    """capture() keyword arguments: one or two rows of ids (3..VOCAB-1: no pad, bos or eos id), padded right
    or left; a decoder row for the encoder-decoders."""
    rows = [[int(t) for t in rng.integers(3, VOCAB, int(rng.integers(4, 21)))] for _ in range(int(rng.integers(1, 3)))]
    width = max(len(r) for r in rows)
    left = family not in SEQ2SEQ and rng.random() < 0.5
    pad = 1 if family in ("roberta", "bart") else 0
    ids = [([pad] * (width - len(r)) + r) if left else (r + [pad] * (width - len(r))) for r in rows]
    mask = [([0] * (width - len(r)) + [1] * len(r)) if left else ([1] * len(r) + [0] * (width - len(r))) for r in rows]
    out = dict(ids=ids, attention_mask=mask)
    if family in SEQ2SEQ:
        start = 0 if family == "t5" else 2
        decoder = [start] + [int(t) for t in rng.integers(3, VOCAB, int(rng.integers(0, 8)))]
        out["decoder_ids"] = [decoder] * len(rows)
    return out
