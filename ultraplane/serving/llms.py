"""The language models a replica serves: the architecture figures its costs follow from.

Why architecture and not just a parameter count: the KV cache a request holds per token is
`2 x layers x kv_heads x head_dim` values, and grouped-query attention makes it 8x smaller than
the parameter count suggests for Llama 3. The largest batch a replica can hold, and so its
throughput, follows from it. A small catalogue names the published architectures; an explicit
`LanguageModel` serves any other.

Sources: "The Llama 3 Herd of Models" (Meta, arXiv 2407.21783), Table 3 (layers, model
dimension, attention and key/value heads) and the released `config.json` files; the parameter
counts are those of the model cards (8.03B, 70.6B, 405.9B).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BYTES_PER_PARAM", "MODELS", "LanguageModel", "bytes_per_param", "language_model"]

# Bytes per weight by precision. MX formats carry one shared 8-bit scale per 32 values (OCP
# Microscaling spec v1.0), 1/32 byte per weight, which is below the model's resolution.
BYTES_PER_PARAM: dict[str, float] = {
    "MXFP4": 0.5, "MXFP8": 1.0, "FP8": 1.0, "BF16": 2.0, "FP16": 2.0, "TF32": 4.0, "FP32": 4.0,
}


def bytes_per_param(precision: str) -> float:
    """Bytes of one weight at `precision`; an unknown precision is a clear error."""
    try:
        return BYTES_PER_PARAM[str(precision)]
    except KeyError:
        known = ", ".join(sorted(BYTES_PER_PARAM))
        raise ValueError(f"unknown precision {precision!r} (known: {known})") from None


@dataclass(frozen=True)
class LanguageModel:
    """A decoder-only transformer, as much of it as its serving costs need."""

    name: str
    params_b: float  # all weights, billions (what HBM holds and every decode step streams)
    layers: int
    hidden: int  # model dimension = query heads x head dimension
    kv_heads: int  # key/value heads (grouped-query attention)
    head_dim: int
    active_params_b: float | None = None  # a mixture of experts computes with fewer
    source: str = "explicit figures"

    def __post_init__(self) -> None:
        if min(self.params_b, self.layers, self.hidden, self.kv_heads, self.head_dim) <= 0:
            raise ValueError(f"{self.name}: every architecture figure must be positive")

    @property
    def computing_params_b(self) -> float:
        """Billions of parameters one token multiplies through (all of them when dense)."""
        return self.active_params_b if self.active_params_b is not None else self.params_b

    def weight_bytes(self, precision: str) -> float:
        return self.params_b * 1e9 * bytes_per_param(precision)

    def kv_bytes_per_token(self, bytes_per_value: float) -> float:
        """Bytes of KV cache one context token holds: a K and a V vector per layer and KV head."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * bytes_per_value

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs of one token through the weights (2 per multiply-accumulate)."""
        return 2.0 * self.computing_params_b * 1e9

    @property
    def attention_flops_per_context_token(self) -> float:
        """Extra FLOPs per token for each token it attends to: QK^T and AV, each 2 x hidden
        per layer (the part that grows with the context; negligible below a few thousand)."""
        return 4.0 * self.layers * self.hidden


_LLAMA3 = "Meta, The Llama 3 Herd of Models (arXiv 2407.21783), Table 3; model card"

MODELS: dict[str, LanguageModel] = {
    m.name: m
    for m in (
        LanguageModel("llama-3-8b", 8.03, 32, 4096, 8, 128, source=_LLAMA3),
        LanguageModel("llama-3-70b", 70.6, 80, 8192, 8, 128, source=_LLAMA3),
        LanguageModel("llama-3.1-405b", 405.9, 126, 16384, 8, 128, source=_LLAMA3),
    )
}


def language_model(name: str) -> LanguageModel:
    """The catalogued model called `name` (e.g. "llama-3-70b"); the message lists the rest."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise ValueError(f"unknown model {name!r}; known models: {known}") from None
