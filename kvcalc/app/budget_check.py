"""kvcalc's budget terms beside the ones a vLLM log printed, term by term.

Used by ``probe --from-vllm-log`` (with the figures its parser read) and by the calibration
suite over tests/data (tests/test_budget_calibration.py). The log's figures are GiB as
printed; kvcalc's are bytes. ``predict`` runs the same ``budget_inputs`` as ``kvcalc size``
for the release given, even when the pool rules are another line's.
"""

from __future__ import annotations

from typing import Any

from kvcalc.app.settings import Settings
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import record

GIB = 1 << 30
# logged key -> (the budget term it is compared with, the log line it comes from)
TERMS: dict[str, tuple[str, str]] = {
    "weights_gib": ("weights", "Model loading took X GiB"),
    "torch_peak_gib": ("torch_peak", "torch peak memory increase"),
    "non_torch_gib": ("non_torch", "non-torch forward increase memory"),
    "cudagraph_gib": ("cudagraphs", "Estimated CUDA graph memory"),
    "available_kv_gib": ("available", "Available KV cache memory"),
    "consumed_gib": ("consumed", "consumed memory (weights + non-torch)"),
    "peak_activation_gib": ("peak_activation", "peak activation (transient peak + CUDA-graph estimate)"),
}


@record
class TermRow:
    term: str
    log_line: str
    logged_gib: float
    kvcalc_gib: float
    error_gib: float  # kvcalc - logged
    source: str


def predict(
    model: ModelSpec, s: Settings, checkpoint: dict | None = None, stage: int | None = None
) -> tuple[dict[str, int], dict[str, str]]:
    """kvcalc's terms (bytes) and their sources for settings ``s``: of PP stage ``stage``, or of
    the stage with the least KV memory (the one whose block count vLLM keeps); with the release
    line's ``cudagraphs_subtracted`` (1/0), which decides whether a logged estimate is compared."""
    from kvcalc.app import service
    from kvcalc.app.budget import budget_inputs

    model = service.engine_model(model, s)  # a drafter's layers and weights, as evaluate counts them
    setup = service._setup(model, s)
    inputs = budget_inputs(model, s, setup.plan, setup.cache, setup.max_model_len, setup.version, checkpoint, setup.rules)
    if stage is None:
        stage = min(range(len(inputs.available_per_stage)), key=lambda i: inputs.available_per_stage[i])
    terms = {t.name: t for t in inputs.terms[stage]}
    by_kind: dict[str, Any] = {}
    for name, t in terms.items():
        for key, marker in (("weights", "weights"), ("torch_peak", "peak"), ("non_torch", "non-torch"),
                            ("cudagraphs", "CUDA graphs"), ("available", "KV cache memory"), ("requested", "requested")):
            if marker in name:
                by_kind[key] = t
    values = {k: t.bytes for k, t in by_kind.items()}
    values["cudagraphs_subtracted"] = int(setup.rules[0].cudagraphs_subtracted)
    srcs = {k: t.source for k, t in by_kind.items()}
    if "weights" in values and "non_torch" in values:
        values["consumed"] = values["weights"] + values["non_torch"]
        srcs["consumed"] = "weights + non-torch (0.27+ measure both as one free-memory delta)"
    if "torch_peak" in values and "cudagraphs" in values:
        values["peak_activation"] = values["torch_peak"] + values["cudagraphs"]
        srcs["peak_activation"] = "profile-run peak + CUDA graphs (0.31+ print their sum as 'peak activation')"
    return values, srcs


def compare(logged: dict[str, float], predicted: dict[str, int], sources: dict[str, str]) -> list[TermRow]:
    """One row per term the log printed."""
    rows = []
    for key, (term, line) in TERMS.items():
        value = logged.get(key)
        if value is None or term not in predicted:
            continue
        if term == "cudagraphs" and not predicted.get("cudagraphs_subtracted", 1):
            continue  # vLLM prints its estimate there but leaves it out of the budget, as kvcalc does
        mine = predicted[term] / GIB
        rows.append(TermRow(term, line, float(value), round(mine, 4), round(mine - float(value), 4), sources.get(term, "")))
    return rows


def within(error_gib: float, logged_gib: float) -> bool:
    """The issue's acceptance bound: |error| <= max(2 % of the logged figure, 0.25 GiB)."""
    return abs(error_gib) <= max(0.02 * abs(logged_gib), 0.25)
