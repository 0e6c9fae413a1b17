"""Read a mask the way a user writes it: a LITERAL, a .npy file, `file.npz:key`, or `none`.

LITERAL grammar (JSON-like nested lists, optional dtype suffix):

    mask     := value [ "@" dtype ]
    value    := "[" value ("," value)* "]" | scalar
    scalar   := 0 | 1 | true | false | T | F | INT | FLOAT | inf | -inf | +inf | nan | min | -min
    dtype    := bool | int32 | int64 | uint8 | float16 | bfloat16 | float32 | float64

`min` is `finfo(score_dtype).min`, the fill transformers' eager path uses. A literal
without a suffix has no fixed dtype yet: the convention picks its natural one
(`MaskSource.resolve`), because `[[0,1],[1,1]]` means a bool mask to SDPA and an
int64 mask to a transformers tokenizer. Files keep the dtype they were saved with.
Nothing is ever unpickled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.errors import TracerError

DTYPES = ("bool", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64")
KEYWORDS = {"true": True, "false": False, "T": True, "F": False}
_FLOAT_WORDS = {"inf": np.inf, "+inf": np.inf, "-inf": -np.inf, "nan": np.nan}
_TOKEN = re.compile(r"\s*(\[|\]|,|[^\s\[\],]+)")


def numpy_dtype(name: str) -> np.dtype:
    """Dtype by name; bfloat16 comes from ml_dtypes."""
    if name not in DTYPES:
        raise TracerError(f"unknown dtype {name!r}", hint="one of " + ", ".join(DTYPES))
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def finfo_min(score_dtype: str) -> float:
    """The most negative finite value of the score dtype (the HF eager fill)."""
    if score_dtype == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    return float(np.finfo(numpy_dtype(score_dtype)).min)


def finfo_max(score_dtype: str) -> float:
    return -finfo_min(score_dtype)


@dataclass
class MaskSource:
    """A mask as read, before any convention interprets it."""

    origin: str  # "literal" | "npy" | "npz" | "array" | "none" | "keyword"
    text: str  # what the user typed (path, literal or keyword)
    array: np.ndarray | None = None  # fixed-dtype array (files, arrays, suffixed literals)
    values: np.ndarray | None = None  # float64 values of an unsuffixed literal
    kind: str | None = None  # unsuffixed literal: "bool" | "int" | "float"
    keyword: str | None = None  # e.g. "causal" (mlx) or a flex predicate
    overflowed: list[float] = field(default_factory=list)  # literal values that became ±inf when cast
    inferred_note: str | None = None  # set by resolve(): how the dtype was chosen

    @property
    def is_none(self) -> bool:
        return self.origin == "none"

    def resolve(self, preferred: tuple[str, ...], score_dtype: str = "float32") -> np.ndarray:
        """The array in its final dtype. An unsuffixed literal takes the first preferred dtype its values fit."""
        if self.array is not None:
            return self.array
        if self.values is None:
            raise TracerError("no mask array given", hint="pass --mask LITERAL, FILE.npy or FILE.npz:KEY")
        for name in preferred:
            if fits(self.values, self.kind, name):
                self.array = cast_values(self.values, name, self.overflowed)
                article = "an" if self.kind == "int" else "a"
                self.inferred_note = f"dtype {name} inferred for {article} {self.kind} literal (add @dtype to choose)"
                return self.array
        # Nothing preferred fits: keep what the text says, the convention will explain the rejection.
        name = {"bool": "bool", "int": "int64", "float": score_dtype if score_dtype != "bfloat16" else "float32"}[self.kind]
        self.array = cast_values(self.values, name, self.overflowed)
        self.inferred_note = f"dtype {name} from the literal's values"
        return self.array


def fits(values: np.ndarray, kind: str | None, dtype: str) -> bool:
    """Can an unsuffixed literal of this kind be read as `dtype` without changing its meaning?"""
    finite = values[np.isfinite(values)]
    if dtype == "bool":
        return kind in ("bool", "int") and bool(np.isin(values, (0.0, 1.0)).all())
    if dtype in ("int32", "int64", "uint8"):
        if kind == "bool" or kind == "float":
            return False
        if dtype == "uint8":
            return bool(((finite >= 0) & (finite <= 255)).all())
        return True
    return True  # any number reads as a float


def cast_values(values: np.ndarray, dtype: str, overflowed: list[float] | None = None) -> np.ndarray:
    """float64 literal values -> dtype, refusing to change a value silently (except float overflow, recorded)."""
    target = numpy_dtype(dtype)
    if dtype == "bool":
        bad = values[~np.isin(values, (0.0, 1.0))]
        if bad.size:
            raise TracerError(f"a bool literal can only hold 0/1/true/false, not {_fmt(bad.flat[0])}")
        return values.astype(bool)
    if dtype in ("int32", "int64", "uint8"):
        if not np.isfinite(values).all():
            raise TracerError(f"an {dtype} literal cannot hold inf, nan or min", hint="use a float dtype suffix")
        if (values != np.round(values)).any():
            bad = values[values != np.round(values)].flat[0]
            raise TracerError(f"an {dtype} literal cannot hold the fraction {_fmt(bad)}")
        info = np.iinfo(target)
        if values.min(initial=0) < info.min or values.max(initial=0) > info.max:
            raise TracerError(f"a value of the literal does not fit {dtype}")
        return values.astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        out = values.astype(target)
    if overflowed is not None:
        became_inf = np.isfinite(values) & ~np.isfinite(out.astype(np.float64))
        overflowed.extend(float(v) for v in values[became_inf][:5])
    return out


def _fmt(v: float) -> str:
    return repr(float(v))


# ---------- the literal grammar ----------


def split_suffix(text: str) -> tuple[str, str | None]:
    body, at, suffix = text.strip().rpartition("@")
    if not at:
        return text.strip(), None
    suffix = suffix.strip()
    if suffix not in DTYPES:
        raise TracerError(f"unknown dtype suffix @{suffix}", hint="one of " + ", ".join(DTYPES))
    return body.strip(), suffix


def tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise TracerError(f"cannot read the mask literal at character {pos + 1}: {text[pos:pos + 12]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def parse_scalar(token: str, score_dtype: str) -> tuple[float, str]:
    """One element -> (value, kind) with kind in bool|int|float."""
    if token in KEYWORDS:
        return float(KEYWORDS[token]), "bool"
    if token in _FLOAT_WORDS:
        return float(_FLOAT_WORDS[token]), "float"
    if token in ("min", "-min"):
        v = finfo_min(score_dtype)
        return (v if token == "min" else -v), "float"
    if re.fullmatch(r"[+-]?\d+", token):
        return float(int(token)), "int"
    try:
        return float(token), "float"
    except ValueError:
        raise TracerError(
            f"{token!r} is not a mask value",
            hint="use 0/1, true/false, T/F, numbers, inf, -inf, nan or min; lists in [ ]",
        ) from None


def check_depth(tokens: list[str]) -> None:
    depth = 0
    for tok in tokens:
        depth += tok == "["
        depth -= tok == "]"
        if depth > MAX_NDIM:
            raise TracerError(f"the mask literal nests deeper than {MAX_NDIM} levels; a mask has at most {MAX_NDIM} axes")


def parse_nested(tokens: list[str], score_dtype: str) -> tuple[object, set[str]]:
    """Recursive descent over the tokens -> nested Python lists of floats, and the element kinds seen."""
    kinds: set[str] = set()
    pos = 0

    def value():
        nonlocal pos
        if pos >= len(tokens):
            raise TracerError("the mask literal ends too early (a ']' is missing?)")
        tok = tokens[pos]
        pos += 1
        if tok == "[":
            items = []
            if pos < len(tokens) and tokens[pos] == "]":
                pos += 1
                return items
            while True:
                items.append(value())
                if pos >= len(tokens):
                    raise TracerError("the mask literal ends too early (a ']' is missing?)")
                sep = tokens[pos]
                pos += 1
                if sep == "]":
                    return items
                if sep != ",":
                    raise TracerError(f"expected ',' or ']' in the mask literal, found {sep!r}")
        if tok in ("]", ","):
            raise TracerError(f"unexpected {tok!r} in the mask literal")
        v, kind = parse_scalar(tok, score_dtype)
        kinds.add(kind)
        return v

    tree = value()
    if pos != len(tokens):
        raise TracerError(f"unexpected {tokens[pos]!r} after the end of the mask literal")
    return tree, kinds


def rectangular(tree: object) -> np.ndarray:
    """Nested lists -> float64 array, with a clear error for ragged rows."""
    def shape_of(node, depth=0):
        if not isinstance(node, list):
            return ()
        if not node:
            return (0,)
        inner = [shape_of(x, depth + 1) for x in node]
        if any(s != inner[0] for s in inner):
            raise TracerError(f"the mask literal is ragged: rows at depth {depth + 1} have different lengths")
        return (len(node),) + inner[0]

    shape_of(tree)
    return np.array(tree, dtype=np.float64)


def parse_literal(text: str, score_dtype: str = "float32") -> MaskSource:
    body, suffix = split_suffix(text)
    if not body:
        raise TracerError("the mask literal is empty")
    tokens = tokenize(body)
    check_depth(tokens)
    tree, kinds = parse_nested(tokens, score_dtype)
    values = rectangular(tree)
    if "bool" in kinds and (kinds - {"bool"}) and not np.isin(values, (0.0, 1.0)).all():
        raise TracerError("the mask literal mixes true/false with numbers other than 0/1")
    kind = "float" if "float" in kinds else ("int" if "int" in kinds else "bool")
    src = MaskSource("literal", text, values=values, kind=kind)
    if suffix is not None:
        src.array = cast_values(values, suffix, src.overflowed)
    return src


# ---------- files ----------


MAX_NDIM = 8  # a mask lands on [B, H, Q, K]; a few more axes still read


def plain_array(a: object, path: Path, what: str = "array") -> np.ndarray:
    """Only bool, integer and float arrays of a few axes (no complex, datetime, structured or object)."""
    if not isinstance(a, np.ndarray):
        raise TracerError(f"{path}: not a single NumPy {what}", hint="a .npz archive is read as FILE.npz:KEY")
    if a.dtype.kind not in "biuf":
        raise TracerError(f"{path}: the {what} has dtype {a.dtype}; a mask is bool, integer or float")
    if a.ndim > MAX_NDIM:
        raise TracerError(f"{path}: the {what} has {a.ndim} axes; a mask has at most {MAX_NDIM}")
    return a


def load_npy(path: Path) -> np.ndarray:
    from tracer.checkpoint.safetensors_file import check_regular_file

    check_regular_file(path, ".npy file")
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                raise TracerError(f"{path}: not a .npy file (no NumPy header)", hint="a .npz archive is read as FILE.npz:KEY")
        return plain_array(np.load(path, allow_pickle=False), path)
    except (ValueError, EOFError, OSError) as exc:
        raise TracerError(f"{path}: not a plain NumPy array ({str(exc)[:120]})", hint="object arrays are never unpickled") from None


def load_npz_key(path: Path, key: str | None) -> np.ndarray:
    import zipfile

    from tracer.checkpoint.safetensors_file import check_regular_file

    check_regular_file(path, ".npz archive")
    try:
        return _npz_key(path, key)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError) as exc:
        raise TracerError(f"{path}: not a plain NumPy archive ({str(exc)[:120]})") from None


def _npz_key(path: Path, key: str | None) -> np.ndarray:
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        raise TracerError(f"{path}: a single .npy array, not a .npz archive", hint="name it .npy")
    with loaded as z:
        keys = list(z.keys())
        if key is None:
            if len(keys) != 1:
                raise TracerError(f"{path} holds {len(keys)} arrays: name one", hint=f"{path}:KEY with KEY in {keys}")
            key = keys[0]
        if key not in keys:
            raise TracerError(f"{path} has no array {key!r}", hint="arrays: " + ", ".join(keys))
        return plain_array(z[key], path, f"array {key!r}")


def looks_like_file(text: str) -> bool:
    t = text.strip()
    return not t.startswith("[") and (".npy" in t or ".npz" in t)


def load_mask(text: str | np.ndarray | None, score_dtype: str = "float32", mask_dtype: str | None = None,
              keywords: tuple[str, ...] = ()) -> MaskSource:
    """Whatever the user gave -> MaskSource. `keywords` are convention words accepted as-is (e.g. 'causal')."""
    if text is None:
        return MaskSource("none", "none")
    if isinstance(text, np.ndarray):
        return MaskSource("array", f"array{tuple(text.shape)}", array=text)
    t = text.strip()
    if t.lower() in ("none", ""):
        return MaskSource("none", "none")
    head = re.match(r"[A-Za-z_]*", t).group(0)
    if head and head in keywords:
        return MaskSource("keyword", t, keyword=t)
    if looks_like_file(t):
        if mask_dtype:
            raise TracerError("--mask-dtype only applies to a LITERAL; a file keeps its saved dtype")
        path_text, _, key = t.partition(".npz:")
        if key or t.endswith(".npz"):
            path = Path(path_text + ".npz" if key else t)
            return MaskSource("npz", t, array=load_npz_key(path, key or None))
        return MaskSource("npy", t, array=load_npy(Path(t)))
    if mask_dtype:
        _, suffix = split_suffix(t)
        if suffix and suffix != mask_dtype:
            raise TracerError(f"the literal says @{suffix} but --mask-dtype says {mask_dtype}")
        if not suffix:
            t = f"{t}@{mask_dtype}"
    return parse_literal(t, score_dtype)
