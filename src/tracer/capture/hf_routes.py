"""The encoder-only (bert, roberta) and encoder-decoder (t5, bart) routes of the transformers capture.

What differs from the decoder-only capture in `tracer.capture.hf`: which Auto
class loads the folder, the inputs each family takes (token types, decoder ids,
positions as transformers derives them), and how transformers' outputs
(`encoder_hidden_states`, `cross_attentions`, ...) map onto step names. The hook
machinery is shared.

`pooled` (a headless encoder) is not a transformers output: it is computed here
from the last hidden state as sentence-transformers does it (the folder's
`modules.json` / `1_Pooling/config.json`: mean, CLS or max pooling over real
tokens, then L2 normalisation when a Normalize module is listed; without
`modules.json`, mean pooling and no normalisation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracer.checkpoint.jsonload import load_json_file
from tracer.names.hf import ENCODER_DECODER, ENCODER_ONLY
from tracer.errors import TracerError
from tracer.steps import describe

ROUTED = ENCODER_ONLY + ENCODER_DECODER

def step_axes(name: str) -> tuple[str, ...]:
    """Axes of a step from the catalogue (stack prefixes included); a name it lacks is a bug here."""
    doc = describe(name)
    if doc is None:
        raise KeyError(f"step {name!r} is not in tracer.steps.CATALOGUE")
    return doc.axes


# ---------- loading ----------


def auto_class(transformers, config):
    """The Auto class a folder loads with: MLM head, headless encoder, seq2seq LM or causal LM."""
    family = config.model_type
    if family in ENCODER_ONLY:
        architectures = getattr(config, "architectures", None) or []
        if architectures and architectures[0].endswith("ForMaskedLM"):
            return transformers.AutoModelForMaskedLM
        return transformers.AutoModel
    if family in ENCODER_DECODER:
        return transformers.AutoModelForSeq2SeqLM
    return transformers.AutoModelForCausalLM


def is_headless(model, family: str) -> bool:
    """A bare BertModel / RobertaModel: no head, module paths without the `bert.` prefix."""
    return family in ENCODER_ONLY and model.base_model is model


def n_layers(config, stack: str = "") -> int:
    """Blocks in a stack (`encoder.`, `decoder.` or "" for a single stack)."""
    if stack == "decoder.":
        return getattr(config, "num_decoder_layers", None) or config.decoder_layers
    if config.model_type == "t5":
        return config.num_layers
    if config.model_type == "bart":
        return config.encoder_layers
    return config.num_hidden_layers


# ---------- inputs ----------


def route_inputs(family: str, config, ids, mask, position_ids, token_type_ids, decoder_ids, decoder_mask):
    """(keyword arguments for the transformers forward, [(input step, array, op)]) of one routed run."""
    import torch

    batch, pos = ids.shape
    kwargs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    steps = [("input.ids", ids, "input"), ("input.mask", mask, "input")]
    if family in ENCODER_ONLY:
        positions, op, hf_positions = _encoder_positions(family, config, ids, position_ids)
        if hf_positions is not None:
            kwargs["position_ids"] = torch.from_numpy(hf_positions)
        types = np.zeros_like(ids) if token_type_ids is None else _rows(token_type_ids, ids.shape, "token_type_ids")
        if types.min() < 0 or types.max() >= config.type_vocab_size:
            raise TracerError(f"token types must lie in [0, {config.type_vocab_size}), got {types.min()}..{types.max()}")
        kwargs["token_type_ids"] = torch.from_numpy(types)
        steps += [("input.positions", positions, op), ("input.token_types", types, "input" if token_type_ids else "zeros")]
        return kwargs, steps
    if position_ids is not None:
        raise TracerError(f"{family}: positions cannot be given (t5 is relative, bart's encoder counts 0..n-1)")
    if token_type_ids is not None:
        raise TracerError(f"{family}: token types exist only for bert and roberta")
    if decoder_ids is None:
        decoder_ids = [[config.decoder_start_token_id]] * batch
    dec = _rows(decoder_ids, None, "decoder_ids")
    if dec.shape[0] != batch:
        raise TracerError(f"decoder_ids has {dec.shape[0]} rows for {batch} encoder rows")
    if dec.min() < 0 or dec.max() >= config.vocab_size:
        raise TracerError(f"decoder ids must lie in [0, {config.vocab_size}), got {dec.min()}..{dec.max()}")
    dec_mask = np.ones_like(dec) if decoder_mask is None else _rows(decoder_mask, dec.shape, "decoder_attention_mask")
    kwargs["decoder_input_ids"] = torch.from_numpy(dec)
    kwargs["decoder_attention_mask"] = torch.from_numpy(dec_mask)
    if family == "bart":  # both stacks count 0..n-1 whatever the padding; +2 inside embed_positions
        steps.append(("input.positions", np.broadcast_to(np.arange(pos), (batch, pos)).copy(), "hf:bart arange"))
    steps += [("input.decoder_ids", dec, "input"), ("input.decoder_mask", dec_mask, "input" if decoder_mask else "ones")]
    if family == "bart":
        m = dec.shape[1]
        steps.append(("input.decoder_positions", np.broadcast_to(np.arange(m), dec.shape).copy(), "hf:bart arange"))
    return kwargs, steps


def _rows(rows, shape, what: str) -> np.ndarray:
    if not rows or not rows[0] or len({len(r) for r in rows}) != 1:
        raise TracerError(f"{what} must be a non-empty rectangular list of rows")
    array = np.asarray(rows, dtype=np.int64)
    if shape is not None and array.shape != shape:
        raise TracerError(f"{what} shape {array.shape} differs from ids shape {shape}")
    return array


def roberta_positions(ids: np.ndarray, pad_id: int) -> np.ndarray:
    """What RoBERTa computes before adding padding_idx + 1: it counts non-pad *ids* (not the mask); pads -1."""
    real = (ids != pad_id).astype(np.int64)
    return np.cumsum(real, axis=1) * real - 1


def _encoder_positions(family: str, config, ids, position_ids):
    """(positions recorded, op, positions to pass to transformers or None for its own)."""
    if position_ids is not None:
        positions = _rows(position_ids, ids.shape, "position_ids")
        offset = config.pad_token_id + 1 if family == "roberta" else 0
        return positions, "input", positions + offset
    if family == "roberta":
        op = f"hf:roberta cumsum(ids != {config.pad_token_id}) * (ids != pad) - 1, before +padding_idx+1"
        return roberta_positions(ids, config.pad_token_id), op, None
    batch, pos = ids.shape  # bert: the position_ids buffer, 0..n-1 whatever the padding
    return np.broadcast_to(np.arange(pos), (batch, pos)).copy(), "hf:bert arange", None


# ---------- outputs ----------


def route_outputs(family: str, out, config, headless: bool, mask, pooling) -> dict:
    """{step: (array, op)} from what transformers returns itself (and `pooled`, computed from it)."""
    import torch

    from_outputs = {}
    if family in ENCODER_ONLY:
        from_outputs |= _stack_outputs("", out.hidden_states, out.attentions, "", final_norm=False)
        if headless:
            from_outputs["pooled"] = pool(out.last_hidden_state, mask, pooling)
        else:
            from_outputs["logits"] = (_np(out.logits), "hf:logits")
            from_outputs["probs"] = (_np(torch.softmax(out.logits, dim=-1)), "softmax(logits)")
        return from_outputs
    t5 = family == "t5"
    from_outputs |= _stack_outputs("encoder.", out.encoder_hidden_states, out.encoder_attentions, "encoder_", final_norm=t5)
    from_outputs |= _stack_outputs("decoder.", out.decoder_hidden_states, out.decoder_attentions, "decoder_", final_norm=t5)
    for i, weights in enumerate(out.cross_attentions):
        from_outputs[f"decoder.blocks.{i}.cross_attn.weights"] = (_np(weights), f"hf:cross_attentions[{i}]")
    from_outputs["logits"] = (_np(out.logits), "hf:logits")
    from_outputs["probs"] = (_np(torch.softmax(out.logits, dim=-1)), "softmax(logits)")
    return from_outputs


def _stack_outputs(prefix: str, hidden, attentions, source: str, final_norm: bool) -> dict:
    """hidden_states[0] = embed.out; [i+1] = blocks.i.resid_post, except the last when the stack ends in a norm."""
    n = len(hidden) - 1
    steps = {f"{prefix}embed.out": (_np(hidden[0]), f"hf:{source}hidden_states[0]")}
    for i in range(n - 1 if final_norm else n):
        steps[f"{prefix}blocks.{i}.resid_post"] = (_np(hidden[i + 1]), f"hf:{source}hidden_states[{i + 1}]")
    if final_norm:
        steps[f"{prefix}final_norm.out"] = (_np(hidden[n]), f"hf:{source}hidden_states[{n}]")
    for i, weights in enumerate(attentions):
        steps[f"{prefix}blocks.{i}.attn.weights"] = (_np(weights), f"hf:{source}attentions[{i}]")
    return steps


def read_pooling(model_dir: Path) -> tuple[str, bool]:
    """(mode, normalize) a sentence-transformers folder declares; ("mean", False) without modules.json.

    Reads both layouts: sentence-transformers 2.x-5.x (`sentence_transformers.models.Pooling`,
    `pooling_mode_mean_tokens: true`) and 6.x (`...modules.pooling.Pooling`, `pooling_mode: "mean"`).
    """
    modules_path = model_dir / "modules.json"
    if not modules_path.is_file():
        return "mean", False
    mode, normalize = "mean", False
    modules = load_json_file(modules_path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise TracerError(f"{modules_path}: expected a list of module objects")
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            config = load_json_file(model_dir / str(module.get("path", "")) / "config.json")
            config = config if isinstance(config, dict) else {}
            mode = _pooling_mode(config, model_dir)
        elif kind == "Normalize":
            normalize = True
    return mode, normalize


_OLD_POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
}
_NEW_POOLING_MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len"}


def _pooling_mode(config: dict, model_dir: Path) -> str:
    if "pooling_mode" in config:
        chosen = [_NEW_POOLING_MODES.get(config["pooling_mode"], config["pooling_mode"])]
    else:
        chosen = [mode for mode, key in _OLD_POOLING_KEYS.items() if config.get(key)]
        chosen += [k for k, v in config.items() if k.startswith("pooling_mode_") and v and k not in _OLD_POOLING_KEYS.values()]
    if len(chosen) != 1 or chosen[0] not in _OLD_POOLING_KEYS:
        raise TracerError(f"{model_dir}: pooling must be one of cls, mean, max, mean_sqrt_len; the folder says {chosen or 'none'}")
    return chosen[0]


def pool(last_hidden, mask, pooling: tuple[str, bool]):
    """(pooled [batch, d_model], op) as sentence-transformers computes it from the last hidden state."""
    import torch

    mode, normalize = pooling
    keep = torch.from_numpy(mask).to(last_hidden.dtype).unsqueeze(-1)  # [batch, pos, 1]
    if mode == "mean":
        pooled = (last_hidden * keep).sum(1) / torch.clamp(keep.sum(1), min=1e-9)
    elif mode == "mean_sqrt_len":
        pooled = (last_hidden * keep).sum(1) / torch.sqrt(torch.clamp(keep.sum(1), min=1e-9))
    elif mode == "max":
        pooled = torch.where(keep.bool(), last_hidden, torch.finfo(last_hidden.dtype).min).max(1).values
    else:
        pooled = last_hidden[:, 0]
    op = f"sentence-transformers {mode} pooling over real tokens of hf:last_hidden_state"
    if normalize:
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        op += ", then L2-normalised"
    return _np(pooled), op


def cross_mask_rows(keep: np.ndarray) -> np.ndarray:
    """transformers expands the cross-attention mask to [b, 1, dec, enc]; its rows are equal: keep one."""
    if not (keep == keep[:, :, :1, :]).all():
        raise TracerError("cross-attention mask differs between decoder rows")
    return keep[:, :, :1, :]


def _np(tensor) -> np.ndarray:
    return tensor.detach().cpu().contiguous().numpy().copy()
