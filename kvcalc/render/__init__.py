"""Rendering: results -> JSON text, Markdown text, or Rich tables. Returns, never prints.

Every command builds two things: a JSON-able payload (the public contract) and a
``Document`` for people (titled tables and notes). ``render`` turns either into text.
"""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("table", "json", "markdown")


class Table:
    """A titled table; ``align`` is 'r' for numbers, 'l' for text (default: first column 'l')."""

    __slots__ = ("title", "columns", "rows", "align")

    def __init__(self, title: str, columns: list[str], rows: list[list[Any]] | None = None,
                 align: list[str] | None = None) -> None:
        self.title = title
        self.columns = columns
        self.rows = rows if rows is not None else []
        self.align = align

    def aligns(self) -> list[str]:
        if self.align:
            return self.align
        return ["l"] + ["r"] * (len(self.columns) - 1)


class Document:
    """What people read: a title, facts (label, value), tables, notes and sub-sections."""

    __slots__ = ("title", "facts", "tables", "notes", "sections")

    def __init__(self, title: str, facts: list[tuple[str, str]] | None = None, tables: list[Table] | None = None,
                 notes: list[str] | None = None, sections: list[Document] | None = None) -> None:
        self.title = title
        self.facts = facts if facts is not None else []
        self.tables = tables if tables is not None else []
        self.notes = notes if notes is not None else []
        self.sections = sections if sections is not None else []


def to_json(payload: Any) -> str:
    """JSON for people and programs: the top level and the containers inside it are opened one
    item a line (unless short enough to read on one line); deeper values stay on one line, so
    a sweep prints one row a line. json's indent= runs its pure-Python encoder (0.2 s for a
    200-row compare sweep); this takes the C encoder for every value."""
    return _pretty(payload, 0, "")[0] + "\n"


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def _pretty(value: Any, level: int, pad: str) -> tuple[str, str]:
    """(as printed, on one line): each value is encoded once, parents join their children."""
    if level >= 2 or not isinstance(value, (dict, list)) or not value:
        flat = _ENCODE(value)
        return flat, flat
    inner = pad + "  "
    if isinstance(value, dict):
        keys = [_ENCODE(str(k)) for k in value]
        kids = [_pretty(v, level + 1, inner) for v in value.values()]
        flat = "{" + ", ".join(f"{k}: {f}" for k, (_, f) in zip(keys, kids)) + "}"
        if len(flat) + len(pad) <= 88:
            return flat, flat
        return "{\n" + ",\n".join(f"{inner}{k}: {p}" for k, (p, _) in zip(keys, kids)) + "\n" + pad + "}", flat
    kids = [_pretty(v, level + 1, inner) for v in value]
    flat = "[" + ", ".join(f for _, f in kids) + "]"
    if len(flat) + len(pad) <= 88:
        return flat, flat
    return "[\n" + ",\n".join(f"{inner}{p}" for p, _ in kids) + "\n" + pad + "]", flat


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, level: int = 2) -> str:
    out: list[str] = [f"{'#' * level} {doc.title}", ""]
    for label, value in doc.facts:
        out.append(f"- **{label}**: {value}")
    if doc.facts:
        out.append("")
    for table in doc.tables:
        if table.title:
            out += [f"**{table.title}**", ""]
        out.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
        out.append("|" + "|".join("---:" if a == "r" else "---" for a in table.aligns()) + "|")
        for row in table.rows:
            out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        out.append("")
    for sub in doc.sections:
        out.append(to_markdown(sub, level + 1))
    if doc.notes:
        out += ["Notes:", ""] + [f"- {n}" for n in doc.notes] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def to_rich(doc: Document, width: int | None = None) -> str:
    """Render with Rich (imported here only) into a string."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(
        record=True, markup=False, emoji=False, highlight=False, width=width or 120, file=_NullFile(), color_system=None
    )

    def emit(d: Document, depth: int) -> None:
        console.print(d.title if depth == 0 else f"\n{d.title}", style="bold")
        for label, value in d.facts:
            console.print(f"  {label}: {value}")
        for t in d.tables:
            rt = RichTable(title=t.title or None, title_justify="left", show_lines=False)
            for col, a in zip(t.columns, t.aligns()):
                rt.add_column(str(col), justify="right" if a == "r" else "left", overflow="fold")
            for row in t.rows:
                rt.add_row(*(str(c) for c in row))
            console.print(rt)
        for sub in d.sections:
            emit(sub, depth + 1)
        if d.notes:
            console.print("Notes:")
            for n in d.notes:
                console.print(f"  - {n}")

    emit(doc, 0)
    return console.export_text()


class _NullFile:
    def write(self, _s: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def render(fmt: str, payload: Any, doc: Document | None) -> str:
    if fmt == "json" or doc is None:
        return to_json(payload)
    if fmt == "markdown":
        return to_markdown(doc)
    return to_rich(doc)
