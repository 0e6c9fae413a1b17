"""How the next token is picked from the logits: greedy (argmax) or sampled with temperature, top-k and top-p.

Sampling draws from NumPy's Generator seeded with `seed`, so the same seed gives the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.errors import TracerError


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def describe(self) -> str:
        if self.greedy:
            return "greedy (argmax)"
        parts = [f"temperature {self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k {self.top_k}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        parts.append(f"seed {self.seed}" if self.seed is not None else "unseeded")
        return "sampling: " + ", ".join(parts)


def sampling_from_flags(temperature: float | None, top_k: int | None, top_p: float | None, seed: int | None) -> Sampling:
    """The command-line flags -> a Sampling, refusing values that contradict each other.

    Greedy unless --temperature > 0, --top-k or --top-p asks for sampling (temperature then defaults to 1).
    """
    if temperature is not None and (temperature < 0 or not np.isfinite(temperature)):
        raise TracerError(f"`temperature` must be 0 (greedy) or positive, not {temperature:g}")
    if top_k is not None and top_k < 1:
        raise TracerError(f"`top_k` must be at least 1, not {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise TracerError(f"`top_p` must be in (0, 1], not {top_p:g}")
    filters = [f for f, v in (("`top_k`", top_k), ("`top_p`", top_p)) if v is not None]
    if temperature == 0.0 and filters:
        raise TracerError(f"{' and '.join(filters)} sample(s), but `temperature` 0 asks for greedy decoding",
                          hint="drop `temperature` 0 to sample, or drop the sampling flags for greedy")
    sampling = (temperature is not None and temperature > 0) or bool(filters)
    if seed is not None and not sampling:
        raise TracerError("`seed` only matters when sampling, and greedy decoding is chosen",
                          hint="add `temperature` T (T > 0), `top_k` or `top_p`")
    if not sampling:
        return Sampling()
    return Sampling(temperature if temperature is not None else 1.0, top_k, top_p, seed)


def sampling_probs(logits: np.ndarray, s: Sampling) -> np.ndarray:
    """[vocab] logits -> the distribution tokens are drawn from (temperature, then top-k, then top-p), float64."""
    z = logits.astype(np.float64) / s.temperature
    if s.top_k is not None and s.top_k < z.size:
        kth = np.partition(z, -s.top_k)[-s.top_k]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    if s.top_p is not None and s.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]  # mass of the tokens ranked above each one
        drop = order[before >= s.top_p]  # keep the smallest prefix whose mass reaches top_p
        p[drop] = 0.0
        p /= p.sum()
    return p


def choose(logits: np.ndarray, s: Sampling, rng: np.random.Generator | None) -> int:
    """[vocab] -> the next token id."""
    if s.greedy:
        return int(np.argmax(logits))
    p = sampling_probs(logits, s)
    return int(rng.choice(p.size, p=p))
