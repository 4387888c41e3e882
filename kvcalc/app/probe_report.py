"""What a probe reports: measurements (rows) grouped into checks. Pure data: no torch, no
I/O, no formatting (``kvcalc.render.probe`` turns a report into JSON, tables and Markdown).

A row compares one predicted number with one measured number. It agrees when the
measured value lies within ``tolerance`` of the prediction, or inside
``[predicted_min, predicted_max]`` when the prediction is a range (a log that rounds the
memory it reports to 0.01 GiB only pins the prediction down to a range). A row can also
carry a shape mismatch, which makes it disagree whatever the bytes say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AGREE = "agree"
DISAGREE = "disagree"
INFO = "info"


@dataclass(frozen=True)
class Row:
    what: str
    predicted: int | float
    measured: int | float | None
    unit: str = "B"  # B | blocks | tokens | x
    tolerance: int | float = 0
    predicted_min: int | float | None = None
    predicted_max: int | float | None = None
    note: str = ""
    mismatch: str = ""  # e.g. a tensor shape that differs from the predicted one
    info: bool = False  # shown for context, never decides the verdict
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def difference(self) -> int | float | None:
        if self.measured is None:
            return None
        d = self.measured - self.predicted
        return round(d, 6) if isinstance(d, float) else d

    @property
    def verdict(self) -> str:
        if self.info or self.measured is None:
            return INFO
        if self.mismatch:
            return DISAGREE
        if self.predicted_min is not None and self.predicted_max is not None:
            return AGREE if self.predicted_min <= self.measured <= self.predicted_max else DISAGREE
        return AGREE if abs(self.measured - self.predicted) <= self.tolerance else DISAGREE


@dataclass(frozen=True)
class AllocFacts:
    """What the allocation check laid out."""

    pp_rank: int
    pp: int
    tp: int
    layers_probed: int
    rank_layers: int
    num_blocks: int
    block_size: int
    kv_dtype: str
    grouping: str
    bytes_per_block: int  # the probed layers
    rank_bytes_per_block: int  # every layer of the rank


@dataclass(frozen=True)
class ModelCacheFacts:
    """What the model-cache check built and ran."""

    prompt: int
    gen: int
    layers: int
    model_layers: int
    dtype: str
    device: str
    transformers_bytes: int  # visible K+V bytes of the built layers
    vllm_bytes: int  # what vLLM would hold for the same layers and request
    vllm_block_size: int


@dataclass(frozen=True)
class EngineFacts:
    """What the engine check started."""

    available_bytes: int
    memory_given: bool  # --kv-cache-memory, else profiled by the worker
    max_model_len: int
    block_size: int
    gpu: str


@dataclass(frozen=True)
class LogFacts:
    """What the log check read from the log and derived from it."""

    log_format: str
    vllm_version: str | None  # as the log names it
    printed_gib: str
    low_bytes: int
    high_bytes: int
    max_model_len: int
    block_size: int
    bytes_per_block: int
    blocks_low: int
    blocks_high: int


Facts = AllocFacts | ModelCacheFacts | EngineFacts | LogFacts


@dataclass
class Check:
    """One of the four checks: its rows, what it compared, and why the tolerances are what they are."""

    name: str  # alloc | model-cache | engine | vllm-log
    title: str
    engine: str  # which engine's numbers the predictions are for
    rows: list[Row] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    facts: Facts | None = None  # the figures the check worked with, shown above its rows
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        decided = [r.verdict for r in self.rows if r.verdict != INFO]
        if not decided:
            return INFO
        return AGREE if all(v == AGREE for v in decided) else DISAGREE


@dataclass
class ProbeReport:
    model: str
    source: str
    checks: list[Check] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        verdicts = [c.verdict for c in self.checks]
        if DISAGREE in verdicts:
            return DISAGREE
        return AGREE if AGREE in verdicts else INFO

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == DISAGREE else 0
