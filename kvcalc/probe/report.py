"""What a probe reports: measurements (rows) grouped into checks. Pure: no torch, no I/O.

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

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what": self.what,
            "unit": self.unit,
            "predicted": self.predicted,
            "measured": self.measured,
            "difference": self.difference,
            "tolerance": self.tolerance,
            "verdict": self.verdict,
        }
        if self.predicted_min is not None:
            out["predicted_min"] = self.predicted_min
            out["predicted_max"] = self.predicted_max
        if self.mismatch:
            out["mismatch"] = self.mismatch
        out["explanation"] = self.note
        if self.details:
            out["details"] = self.details
        return out


@dataclass
class Check:
    """One of the four checks: its rows, what it compared, and why the tolerances are what they are."""

    name: str  # alloc | model-cache | engine | vllm-log
    title: str
    engine: str  # which engine's numbers the predictions are for
    rows: list[Row] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        decided = [r.verdict for r in self.rows if r.verdict != INFO]
        if not decided:
            return INFO
        return AGREE if all(v == AGREE for v in decided) else DISAGREE

    def payload(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "title": self.title,
            "engine": self.engine,
            "verdict": self.verdict,
            "facts": {k: v for k, v in self.facts},
            "measurements": [r.payload() for r in self.rows],
            "explanation": list(self.explanation),
            "details": self.details,
        }


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

    def payload(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "source": self.source,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "checks": [c.payload() for c in self.checks],
        }

    def document(self, units: str = "iec"):  # noqa: ANN201 - kvcalc.render.Document
        from kvcalc.render import Document, Table

        doc = Document(f"kvcalc probe {self.model}: {self.verdict.upper()}")
        doc.facts.append(("model", f"{self.model} ({self.source})"))
        for check in self.checks:
            sub = Document(f"{check.title}: {check.verdict}")
            sub.facts = [("numbers for", check.engine), *check.facts]
            table = Table(
                "",
                ["measure", "predicted", "measured", "difference", "tolerance", "verdict"],
                align=["l", "r", "r", "r", "r", "l"],
            )
            for r in check.rows:
                table.rows.append(
                    [
                        r.what,
                        _fmt_pred(r, units),
                        _fmt(r.measured, r.unit, units),
                        _fmt(r.difference, r.unit, units, signed=True),
                        _fmt_tol(r, units),
                        r.verdict + (f" ({r.mismatch})" if r.mismatch else ""),
                    ]
                )
            sub.tables.append(table)
            sub.notes = [n for n in check.explanation] + [f"{r.what}: {r.note}" for r in check.rows if r.note]
            doc.sections.append(sub)
        return doc


def _fmt(value: int | float | None, unit: str, units: str, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:+.4f}x" if signed else f"{value:.4f}x"
    if isinstance(value, float):
        return f"{value:+,.2f}" if signed else f"{value:,.2f}"
    text = f"{value:+,}" if signed else f"{value:,}"
    if unit == "B":
        from kvcalc.core.units import format_bytes

        if abs(value) >= 1024:
            human = format_bytes(abs(value), units)
            text += f" ({'-' if value < 0 else ''}{human})"
        return text
    return f"{text} {unit}" if unit else text


def _fmt_pred(r: Row, units: str) -> str:
    if r.predicted_min is not None and r.predicted_max is not None and r.predicted_min != r.predicted_max:
        if r.unit == "x":
            return f"{r.predicted_min:.4f}..{r.predicted_max:.4f}x"
        return f"{r.predicted_min:,}..{r.predicted_max:,} {r.unit}".rstrip()
    return _fmt(r.predicted, r.unit, units)


def _fmt_tol(r: Row, units: str) -> str:
    if r.info:
        return "-"
    if r.predicted_min is not None:
        return "range"
    if not r.tolerance:
        return "exact"
    return "±" + _fmt(r.tolerance, r.unit, units)
