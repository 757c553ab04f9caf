"""Model metadata the performance model needs besides the profiling runs.

Parameter counts, global batch sizes, ``seq_hid`` (sequence length x hidden
size x layers: activation elements per sample over all layers) and layer
counts follow the Rubick authors' artifact (AlibabaPAI/reconfigurable-dl-
scheduler, ``artifact/71_performance_model/model/validate_*.py``,
Apache-2.0). The parameter counts agree with ``parameter_size`` in each
model's ``profiles/<model>/config.csv`` except for LLaMA-30B, whose released
profile (``profiles/llama30b``) is a byte-for-byte copy of LLaMA-7B's; for it
``profile_model`` names the model the profile runs really measured, and the
performance model scales compute from that model (see ``compute_scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

MI = 1024.0**2


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One trainable model of the Rubick traces.

    ``name`` is the workload's ``application``; ``profile`` the folder under
    ``profiles/``; ``placements`` the file stem under ``placements/``;
    ``authors_name`` the row in ``profiles/fitted_params.csv``.
    """

    name: str
    profile: str
    placements: str
    authors_name: str
    params_mi: float
    global_batch: int
    seq_hid: int
    layers: int
    profile_model: str | None = None

    @property
    def activation_per_sample(self) -> float:
        """Activation elements of one sample at one layer boundary (seq x hidden)."""
        return self.seq_hid / self.layers


def _spec(name: str, profile: str, placements: str, authors: str, params: int, batch: int, seq_hid: int,
          layers: int, profile_model: str | None = None) -> ModelSpec:
    """A spec from a parameter count (not Mi)."""
    return ModelSpec(name, profile, placements, authors, params / MI, batch, seq_hid, layers, profile_model)


CATALOG: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        _spec("vit", "vit", "vit", "vit", 85952456, 64, 768 * 512 * 12, 12),
        _spec("roberta", "roberta", "roberta", "roberta", 355412057, 64, 1024 * 512 * 24, 24),
        _spec("bert", "bert", "bert", "bert", 336297858, 32, 1024 * 512 * 24, 24),
        _spec("t5", "t5", "t5", "t5", 1240809472, 16, 1024 * 512 * 32, 32),
        _spec("gpt2", "gpt2", "gpt2", "gpt2", 1557686400, 16, 1600 * 1024 * 48, 48),
        _spec("llama7", "llama7b", "llama7", "llama7B", 6738423808, 8, 4096 * 2048 * 32, 32),
        _spec(
            "llama30", "llama30b", "llama30", "llama30B", 33170309120, 4, 5120 * 2048 * 40, 40,
            profile_model="llama7",
        ),
    )
}

_ALIASES = {
    "llama7b": "llama7",
    "llama-7b": "llama7",
    "llama30b": "llama30",
    "llama-30b": "llama30",
}


def model_names() -> list[str]:
    """Canonical model names, in catalog order."""
    return list(CATALOG)


def spec_for(name: str) -> ModelSpec:
    """The spec of ``name`` (case-insensitive; ``llama7B`` etc. accepted)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return CATALOG[key]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(CATALOG)}") from None


def compute_scale(spec: ModelSpec) -> float:
    """Factor from the profiled model's compute to ``spec``'s, per iteration.

    1.0 when the profile measured ``spec`` itself. Otherwise forward/backward
    work is taken proportional to parameters x samples per iteration (same
    sequence length), the usual 6 x params x tokens estimate of training FLOPs.
    """
    if spec.profile_model is None:
        return 1.0
    base = CATALOG[spec.profile_model]
    return (spec.params_mi * spec.global_batch) / (base.params_mi * base.global_batch)
