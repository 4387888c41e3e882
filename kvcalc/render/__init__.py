"""Rendering: results -> JSON text, Markdown text, or Rich tables. Returns, never prints.

Tables fit the terminal (``COLUMNS`` or its real width); cells show one human figure while the
JSON keeps the integers; colour only on a TTY and never with ``NO_COLOR``.

Every command builds two things: a JSON-able payload (the public contract) and a
``Document`` for people (titled tables and notes). ``render`` turns either into text.
"""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("table", "json", "markdown")


class Table:
    """A titled table; ``align`` is 'r' for numbers, 'l' for text (default: first column 'l')."""

    __slots__ = ("title", "columns", "rows", "align", "keep")

    def __init__(self, title: str, columns: list[str], rows: list[list[Any]] | None = None,
                 align: list[str] | None = None, keep: tuple[int, ...] = (0,)) -> None:
        self.title = title
        self.columns = columns
        self.rows = rows if rows is not None else []
        self.align = align
        # columns never wrapped or folded: the names a user types (model, Hub id, GPU)
        self.keep = keep

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
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


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


def terminal_width(default: int = 80) -> int:
    """Columns to render for: ``COLUMNS`` when set, else the terminal's width, else ``default``."""
    import os
    import sys

    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) >= 20:
        return int(cols)
    try:
        if sys.stdout.isatty():
            return max(20, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        pass
    return default


def use_colour() -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` (https://no-color.org) or TERM=dumb."""
    import os
    import sys

    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(sys.stdout.isatty())
    except (ValueError, AttributeError):
        return False


# words highlighted when colour is on: verdicts and what does not fit
HIGHLIGHTS = (
    (r"\bPASS(ED)?\b", "bold green"),
    (r"\b(FAIL(ED)?|ERROR)\b", "bold red"),
    (r"does not fit|cannot be computed", "bold red"),
)


def _wrapped(label: str, value: str, width: int) -> str:
    """A fact or note on lines of at most ``width``, continuation lines indented; words (model
    names, Hub ids, paths) are never split."""
    import textwrap

    lines: list[str] = []
    for i, para in enumerate(str(value).split("\n")):
        first = f"  {label}" if i == 0 else "    "
        lines += textwrap.wrap(
            para, width=max(width, 20), initial_indent=first, subsequent_indent="    ",
            break_long_words=False, break_on_hyphens=False,
        ) or [first.rstrip()]
    return "\n".join(lines)


def to_rich(doc: Document, width: int | None = None, colour: bool | None = None) -> str:
    """Render with Rich (imported here only) into a string that fits ``width`` columns (default:
    the terminal's, see ``terminal_width``); ANSI colour only when ``colour`` (default: a TTY
    without NO_COLOR). Columns in ``Table.keep`` (names: models, Hub ids, GPUs) never fold."""
    from rich.console import Console
    from rich.text import Text

    w = width or terminal_width()
    on = use_colour() if colour is None else colour
    console = Console(
        record=True, markup=False, emoji=False, highlight=False, width=w, file=_NullFile(),
        color_system="standard" if on else None, force_terminal=on, no_color=not on,
    )

    def text(s: str, style: str = "") -> Text:
        t = Text(s, style=style)
        if on:
            for pattern, st in HIGHLIGHTS:
                t.highlight_regex(pattern, st)
        return t

    def emit(d: Document, depth: int) -> None:
        console.print(text(d.title if depth == 0 else f"\n{d.title}", "bold"), soft_wrap=True)
        for label, value in d.facts:
            console.print(text(_wrapped(f"{label}: ", value, w)), soft_wrap=True)
        for t in d.tables:
            for part in fit_columns(t, w):
                if part.columns:
                    console.print(_rich_table(part, text, w))
                else:  # not even two columns fit: one block of lines per row
                    _print_rows(console, t, text, w)
        for sub in d.sections:
            emit(sub, depth + 1)
        if d.notes:
            console.print("Notes:")
            for n in d.notes:
                console.print(text(_wrapped("- ", n, w)), soft_wrap=True)

    emit(doc, 0)
    return "\n".join(line.rstrip() for line in console.export_text(styles=on).split("\n"))


SHORT = 14  # cells up to this long are never wrapped
GAP = 3  # columns between two cells: padding, rule, padding


def _min_widths(t: Table) -> list[int]:
    """Per column, the narrowest it may be: its longest word, or its longest cell when kept."""
    out = []
    for i, col in enumerate(t.columns):
        cells = [str(col), *(str(r[i]) for r in t.rows if i < len(r))]
        if i in t.keep:
            out.append(max(max(len(x) for c in cells for x in c.split("\n")), 1))
        else:
            # a short cell (a figure with its unit: 79.65 GiB, [0, 80)) stays on one line
            out.append(max([len(c) if len(c) <= SHORT else len(x) for c in cells for x in c.split()] + [1]))
    return out


def fit_columns(t: Table, width: int) -> list[Table]:
    """``t`` as one or more tables no wider than ``width``: when its columns do not fit side by
    side, they are split into groups, each repeating the first (name) column. An empty list of
    columns means not even the first column and one more fit."""
    mins = _min_widths(t)
    if sum(mins) + GAP * (len(mins) - 1) <= width or len(mins) < 2:
        return [t]
    groups: list[list[int]] = []
    used = width + 1
    for i in range(1, len(mins)):
        if used + GAP + mins[i] > width:
            groups.append([])
            used = mins[0]
        groups[-1].append(i)
        used += GAP + mins[i]
    if any(mins[0] + GAP + mins[g[0]] > width for g in groups):
        return [Table(t.title, [], [])]
    aligns = t.aligns()
    parts = []
    for n, g in enumerate(groups):
        cols = [0, *g]
        title = t.title if n == 0 else (f"{t.title} (continued)" if t.title else "")
        parts.append(Table(title, [t.columns[c] for c in cols], [[r[c] if c < len(r) else "" for c in cols] for r in t.rows],
                           align=[aligns[c] for c in cols], keep=tuple(k for k, c in enumerate(cols) if c in t.keep)))
    return parts


def _print_rows(console: Any, t: Table, text: Any, w: int) -> None:
    if t.title:
        console.print(text(t.title, "bold"), soft_wrap=True)
    for row in t.rows:
        console.print(text(str(row[0]), "bold"), soft_wrap=True)
        for col, cell in zip(t.columns[1:], row[1:]):
            if str(cell) != "":
                console.print(text(_wrapped(f"{col}: ", cell, w)), soft_wrap=True)


def _max_widths(t: Table) -> list[int]:
    return [max(len(x) for c in [col, *(r[i] for r in t.rows if i < len(r))] for x in str(c).split("\n"))
            for i, col in enumerate(t.columns)]


def column_widths(t: Table, width: int) -> list[int]:
    """Each column's width: its widest cell when all fit, else its minimum plus a share of the
    room left, in proportion to what it lacks (Rich's own shrinking may cut words)."""
    lo, hi = _min_widths(t), _max_widths(t)
    hi = [max(a, b) for a, b in zip(lo, hi)]
    room = width - GAP * (len(lo) - 1)
    if sum(hi) <= room:
        return hi
    out = list(lo)
    extra = room - sum(lo)
    want = [b - a for a, b in zip(lo, hi)]
    total = sum(want)
    if extra > 0 and total:
        for i, need in enumerate(want):
            out[i] += min(need, extra * need // total)
        left = room - sum(out)
        for i in sorted(range(len(out)), key=lambda k: want[k] - (out[k] - lo[k]), reverse=True):
            if left <= 0:
                break
            add = min(left, hi[i] - out[i])
            out[i] += add
            left -= add
    return out


def _rich_table(t: Table, text: Any, width: int) -> Any:
    """A compact Rich table: a rule under the header, no outer frame, one space between columns;
    cells wrap at spaces only (never inside a number or a word); kept columns never wrap."""
    from rich import box
    from rich.table import Table as RichTable

    rt = RichTable(title=t.title or None, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                   padding=(0, 1), show_edge=False)
    for i, (col, a, w) in enumerate(zip(t.columns, t.aligns(), column_widths(t, width))):
        keep = i in t.keep
        rt.add_column(str(col), justify="right" if a == "r" else "left", no_wrap=keep,
                      overflow="ellipsis" if keep else "fold", width=w)
    for row in t.rows:
        rt.add_row(*(text(str(c)) for c in row))
    return rt


class _NullFile:
    def write(self, _s: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def without_repeats(doc: Document, seen: set[str] | None = None) -> Document:
    """The document with each note said once: a section's note already made above is dropped."""
    seen = set() if seen is None else seen
    notes = []
    for n in doc.notes:
        if n not in seen:
            seen.add(n)
            notes.append(n)
    doc.notes = notes
    for sub in doc.sections:
        without_repeats(sub, seen)
    return doc


def render(fmt: str, payload: Any, doc: Document | None) -> str:
    if fmt == "json" or doc is None:
        return to_json(payload)
    doc = without_repeats(doc)
    if fmt == "markdown":
        return to_markdown(doc)
    return to_rich(doc)
