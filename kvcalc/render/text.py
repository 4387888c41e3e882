"""Documents as terminal text that fits the terminal: ``COLUMNS`` or the terminal's real width
(80 when output is not a terminal). Tables are laid out here (stdlib only, so a table costs no
rich import at start-up): a column is never narrower than its longest word, names (the columns
in ``Table.keep``: models, Hub ids, GPUs) never wrap, short figures (``79.65 GiB``) stay on one
line, and a table too wide for the terminal is split into column groups that repeat its first
column. Colour (ANSI) only on a TTY and never with ``NO_COLOR``; PASS, FAIL, ERROR and "does not
fit" are highlighted."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from typing import Any

from kvcalc.render import Document, Table

SHORT = 14  # cells up to this long are never wrapped
GAP = 3  # spaces between two columns
BOLD, RESET = "\x1b[1m", "\x1b[0m"
# words highlighted when colour is on: verdicts and what does not fit
HIGHLIGHTS = (
    (re.compile(r"\bPASS(ED)?\b"), "\x1b[1;32m"),
    (re.compile(r"\b(FAIL(ED)?|ERROR)\b"), "\x1b[1;31m"),
    (re.compile(r"does not fit|cannot be computed|\bNO\b|refuses to start"), "\x1b[1;31m"),
    (re.compile(r"\bwarning:"), "\x1b[1;33m"),
)


def terminal_width(default: int = 80) -> int:
    """Columns to render for: ``COLUMNS`` when set, else the terminal's width, else ``default``."""
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
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(sys.stdout.isatty())
    except (ValueError, AttributeError):
        return False


def paint(line: str, on: bool, style: str = "") -> str:
    """``line`` with its highlights (and ``style`` around it) when colour is on."""
    if not on:
        return line
    for pattern, code in HIGHLIGHTS:
        line = pattern.sub(f"{code}\\g<0>{RESET}{style}", line)
    return f"{style}{line}{RESET}" if style else line


def wrapped(label: str, value: Any, width: int) -> list[str]:
    """A fact or note on lines of at most ``width``, continuation lines indented; words (model
    names, Hub ids, paths) are never split."""
    lines: list[str] = []
    for i, para in enumerate(str(value).split("\n")):
        first = f"  {label}" if i == 0 else "    "
        lines += textwrap.wrap(
            para, width=max(width, 20), initial_indent=first, subsequent_indent="    ",
            break_long_words=False, break_on_hyphens=False,
        ) or [first.rstrip()]
    return lines


def min_widths(t: Table) -> list[int]:
    """Per column, the narrowest it may be: its longest word (a short cell: all of it), or its
    longest cell when kept."""
    out = []
    for i, col in enumerate(t.columns):
        cells = [str(col), *(str(r[i]) for r in t.rows if i < len(r))]
        if i in t.keep:
            out.append(max(max(len(x) for c in cells for x in c.split("\n")), 1))
        else:
            out.append(max([len(c) if len(c) <= SHORT else len(x) for c in cells for x in c.split()] + [1]))
    return out


def max_widths(t: Table) -> list[int]:
    return [max(len(x) for c in [col, *(r[i] for r in t.rows if i < len(r))] for x in str(c).split("\n"))
            for i, col in enumerate(t.columns)]


def fit_columns(t: Table, width: int) -> list[Table]:
    """``t`` as one or more tables no wider than ``width``: when its columns do not fit side by
    side, they are split into groups, each repeating the key columns that name a row (``t.key``,
    at least the first). An empty list of columns means not even the key and one more fit."""
    mins = min_widths(t)
    if sum(mins) + GAP * (len(mins) - 1) <= width or len(mins) < 2:
        return [t]
    key = list(range(max(1, min(t.key, len(mins) - 1))))
    key_w = sum(mins[k] for k in key) + GAP * (len(key) - 1)
    if len(key) > 1 and (key_w > 2 * width // 3 or key_w + GAP + min(mins[len(key):]) > width):
        key, key_w = [0], mins[0]  # the key would leave too little room: repeat the first column only
    groups: list[list[int]] = []
    used = width + 1
    for i in range(len(key), len(mins)):
        if used + GAP + mins[i] > width:
            groups.append([])
            used = key_w
        groups[-1].append(i)
        used += GAP + mins[i]
    if any(key_w + GAP + mins[g[0]] > width for g in groups):
        return [Table(t.title, [], [])]
    aligns = t.aligns()
    parts = []
    for n, g in enumerate(groups):
        cols = [*key, *g]
        title = t.title if n == 0 else (f"{t.title} (continued)" if t.title else "")
        parts.append(Table(title, [t.columns[c] for c in cols], [[r[c] if c < len(r) else "" for c in cols] for r in t.rows],
                           align=[aligns[c] for c in cols], keep=tuple(k for k, c in enumerate(cols) if c in t.keep),
                           key=len(key)))
    return parts


def column_widths(t: Table, width: int) -> list[int]:
    """Each column's width: its widest cell when all fit, else its minimum plus a share of the
    room left, in proportion to what it lacks."""
    lo, hi = min_widths(t), max_widths(t)
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


def _cell_lines(value: Any, width: int, keep: bool) -> list[str]:
    text = str(value)
    if keep or len(text) <= width:
        return text.split("\n")
    out: list[str] = []
    for para in text.split("\n"):
        out += textwrap.wrap(para, width=width, break_on_hyphens=False) or [""]
    return out


def table_lines(t: Table, width: int, on: bool) -> list[str]:
    """A table as lines: title, header (bottom-aligned, bold), a rule, the rows."""
    widths = column_widths(t, width)
    aligns = t.aligns()

    def block(cells: list[Any], bottom: bool) -> list[str]:
        split = [_cell_lines(c, w, i in t.keep) for i, (c, w) in enumerate(zip(cells, widths))]
        height = max(len(x) for x in split)
        split = [([""] * (height - len(x)) + x) if bottom else (x + [""] * (height - len(x))) for x in split]
        rows = []
        for k in range(height):
            parts = [(s[k].rjust(w) if a == "r" else s[k].ljust(w)) for s, w, a in zip(split, widths, aligns)]
            rows.append((" " * GAP).join(parts).rstrip())
        return rows

    out = [paint(t.title, on, BOLD)] if t.title else []
    out += [paint(x, on, BOLD) for x in block(list(t.columns), bottom=True)]
    out.append("─" * (sum(widths) + GAP * (len(widths) - 1)))
    for row in t.rows:
        out += [paint(x, on) for x in block([*row, *[""] * (len(widths) - len(row))], bottom=False)]
    return out


def _row_blocks(t: Table, width: int, on: bool) -> list[str]:
    """A table too wide for even two columns: one block of lines per row."""
    out = [paint(t.title, on, BOLD)] if t.title else []
    for row in t.rows:
        out.append(paint(str(row[0]), on, BOLD))
        for col, cell in zip(t.columns[1:], row[1:]):
            if str(cell) != "":
                out += [paint(x, on) for x in wrapped(f"{col}: ", cell, width)]
    return out


def to_text(doc: Document, width: int | None = None, colour: bool | None = None) -> str:
    w = width or terminal_width()
    on = use_colour() if colour is None else colour
    out: list[str] = []

    def emit(d: Document, depth: int) -> None:
        if depth:
            out.append("")
        out.append(paint(d.title, on, BOLD))
        for label, value in d.facts:
            out.extend(paint(x, on) for x in wrapped(f"{label}: ", value, w))
        for t in d.tables:
            for part in fit_columns(t, w):
                out.extend(table_lines(part, w, on) if part.columns else _row_blocks(t, w, on))
        for sub in d.sections:
            emit(sub, depth + 1)
        if d.notes:
            out.append("Notes:")
            for n in d.notes:
                out.extend(paint(x, on) for x in wrapped("- ", n, w))

    emit(doc, 0)
    return "\n".join(line.rstrip() for line in out) + "\n"
