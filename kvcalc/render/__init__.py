"""Rendering: results -> JSON text, Markdown text, or Rich tables. Returns, never prints.

Every command builds two things: a JSON-able payload (the public contract) and a
``Document`` for people (titled tables and notes). ``render`` turns either into text.
"""

from __future__ import annotations

import json
import re
from typing import Any

FORMATS = ("table", "json", "markdown")

# what a name, a path or a message must never carry into a terminal, a CI log or a file people
# read: C0/C1 control characters (newlines that start workflow commands, ANSI/OSC escapes),
# bidirectional overrides, lone surrogates (undecodable bytes of a path) and the two
# non-characters XML 1.0 refuses (U+FFFE, U+FFFF)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def clean(text: Any) -> str:
    """``text`` with every control character shown as its escape (a newline as ``\\n``, ESC as
    ``\\x1b``): every human output (tables, Markdown, annotations, JUnit, error lines) goes through it."""
    s = str(text)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1].replace("\\\\", "\\"), s) if _CONTROL.search(s) else s


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


def clean_blocks(blocks: list[tuple]) -> list[tuple]:
    """The report's blocks (``kvcalc.render.report``: ("h", level, text), ("p", text), ("code",
    text), ("facts", pairs), ("list", items), ("table", Table), ("chart", Chart)) with every text
    cleaned: a model name holding a newline and ``::warning::`` or an ANSI escape reaches no
    output raw."""
    out: list[tuple] = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append(("h", b[1], clean(b[2])))
        elif kind in ("p", "code"):
            out.append((kind, "\n".join(clean(line) for line in str(b[1]).split("\n"))))
        elif kind == "facts":
            out.append(("facts", [(clean(k), clean(v)) for k, v in b[1]]))
        elif kind == "list":
            out.append(("list", [clean(x) for x in b[1]]))
        elif kind == "table":
            t = b[1]
            out.append(("table", Table(clean(t.title), [clean(c) for c in t.columns],
                                       [[clean(c) for c in row] for row in t.rows], align=t.align)))
        else:
            out.append(b)
    return out


def to_json(payload: Any) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


def _md_cell(value: Any) -> str:
    return clean(str(value).replace("\n", " ")).replace("|", "\\|")


def to_markdown(doc: Document, level: int = 2) -> str:
    out: list[str] = [f"{'#' * level} {clean(doc.title)}", ""]
    for label, value in doc.facts:
        out.append(f"- **{clean(label)}**: {clean(value)}")
    if doc.facts:
        out.append("")
    for table in doc.tables:
        if table.title:
            out += [f"**{clean(table.title)}**", ""]
        out.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
        out.append("|" + "|".join("---:" if a == "r" else "---" for a in table.aligns()) + "|")
        for row in table.rows:
            out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        out.append("")
    for sub in doc.sections:
        out.append(to_markdown(sub, level + 1))
    if doc.notes:
        out += ["Notes:", ""] + [f"- {clean(n)}" for n in doc.notes] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def to_rich(doc: Document, width: int | None = None) -> str:
    """Render with Rich (imported here only) into a string."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(
        record=True, markup=False, emoji=False, highlight=False, width=width or 120, file=_NullFile(), color_system=None
    )

    def emit(d: Document, depth: int) -> None:
        console.print(clean(d.title) if depth == 0 else f"\n{clean(d.title)}", style="bold")
        for label, value in d.facts:
            console.print(f"  {clean(label)}: {clean(value)}")
        for t in d.tables:
            rt = RichTable(title=clean(t.title) or None, title_justify="left", show_lines=False)
            for col, a in zip(t.columns, t.aligns()):
                rt.add_column(clean(col), justify="right" if a == "r" else "left", overflow="fold")
            for row in t.rows:
                rt.add_row(*(clean(c) for c in row))
            console.print(rt)
        for sub in d.sections:
            emit(sub, depth + 1)
        if d.notes:
            console.print("Notes:")
            for n in d.notes:
                console.print(f"  - {clean(n)}")

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
