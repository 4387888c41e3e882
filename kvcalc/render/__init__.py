"""Rendering: results -> JSON text, Markdown text, or terminal tables. Returns, never prints.

Tables fit the terminal (``COLUMNS`` or its real width, ``kvcalc.render.text``); cells show one
human figure while the JSON keeps the integers; colour only on a TTY and never with ``NO_COLOR``.

Every command builds two things: a JSON-able payload (the public contract) and a
``Document`` for people (titled tables and notes). ``render`` turns either into text.
"""

from __future__ import annotations

import json
import re
from typing import Any

FORMATS = ("table", "json", "markdown")
NAME_COLUMNS = frozenset({"model", "name", "Hub id", "GPU", "gpu", "deployment", "variant"})

# what a name, a path or a message must never carry into a terminal, a CI log or a file people
# read: C0/C1 control characters (newlines that start workflow commands, ANSI/OSC escapes),
# bidirectional overrides, lone surrogates (undecodable bytes of a path) and the two
# non-characters XML 1.0 refuses (U+FFFE, U+FFFF)
_CONTROL = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
_compiled: list[re.Pattern[str]] = []  # compiled on first need: most texts are printable (start-up)


def clean(text: Any) -> str:
    """``text`` with every control character shown as its escape (a newline as ``\\n``, ESC as
    ``\\x1b``): every human output (tables, Markdown, annotations, JUnit, error lines) goes through it."""
    s = str(text)
    if s.isprintable():  # no character of _CONTROL is printable: the common case costs no regex
        return s
    if not _compiled:
        _compiled.append(re.compile(_CONTROL))
    rx = _compiled[0]
    return rx.sub(lambda m: repr(m.group())[1:-1].replace("\\\\", "\\"), s) if rx.search(s) else s


class Table:
    """A titled table; ``align`` is 'r' for numbers, 'l' for text (default: first column 'l')."""

    __slots__ = ("title", "columns", "rows", "align", "keep", "key")

    def __init__(self, title: str, columns: list[str], rows: list[list[Any]] | None = None,
                 align: list[str] | None = None, keep: tuple[int, ...] | None = None, key: int = 1) -> None:
        self.title = title
        self.columns = columns
        self.rows = rows if rows is not None else []
        self.align = align
        # columns never wrapped or folded: the names a user types (model, Hub id, GPU); by default
        # the first column and every column named as one of NAME_COLUMNS
        self.keep = keep if keep is not None else tuple(
            i for i, c in enumerate(columns) if i == 0 or str(c) in NAME_COLUMNS)
        # the leading columns that name a row: repeated when a wide table is split into column groups
        self.key = key

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
                                       [[clean(c) for c in row] for row in t.rows], align=t.align, keep=t.keep,
                                       key=t.key)))
        else:
            out.append(b)
    return out


def to_json(payload: Any) -> str:
    """JSON for people and programs: the top level and the containers inside it are opened one
    item a line (unless short enough to read on one line); deeper values stay on one line, so
    a sweep prints one row a line. json's indent= runs its pure-Python encoder (0.2 s for a
    200-row compare sweep); this takes the C encoder for every value."""
    pieces = _pretty(payload, 0, "")[0]
    pieces.append("\n")
    return "".join(pieces)


def _figures(encoded: str) -> str:
    """Byte counts kept as data in texts (core.units.figure) shown in IEC units, in a piece of
    JSON (each piece is rewritten once: a shared object's encoding is kept)."""
    if "\\u001e" not in encoded:
        return encoded
    import re

    from kvcalc.core.units import format_bytes

    return re.sub(r"\\u001e(\d+)\\u001e", lambda m: format_bytes(int(m.group(1))), encoded)


def _c_encoder() -> Any:
    """One C encoder for every value (``json.dumps(v, ensure_ascii=False)``'s output):
    ``JSONEncoder.encode`` builds a new one on each call, which was most of a sweep's JSON time."""
    plain = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    escape = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or escape is None:  # an interpreter without the C accelerator
        return plain.encode
    try:
        run = make(None, plain.default, escape, None, ": ", ", ", False, False, True)  # payloads are trees
    except TypeError:  # another signature than CPython 3.11-3.14's
        return plain.encode

    def encode(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return escape(value)  # type: ignore[no-any-return]
        if kind is int:
            return int.__repr__(value)  # as json writes an int
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value else "false"
        return "".join(run(value, 0))

    return encode


_ENCODE = _c_encoder()
_ESCAPE = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring  # a str as JSON


def _pretty(value: Any, level: int, pad: str, seen: dict[int, tuple[Any, str]] | None = None) -> tuple[list[str], str]:
    """(the pieces printed, in order; the one-line form): each value is encoded once and the
    output is joined once (a sweep's 1.2 MB is not copied per level); a container met again (a
    sweep's rows share their pool's object) is encoded once (``seen``). The one-line form of a
    long container is not built ("": its parent cannot be one line)."""
    if seen is None:
        seen = {}
    if level >= 2 or not isinstance(value, (dict, list)) or not value:
        flat = _flat(value, seen)
        return [flat], flat
    inner = pad + "  "
    room = 88 - len(pad)  # the one-line form is printed when it is at most this long
    is_dict = isinstance(value, dict)
    items = value.values() if isinstance(value, dict) else value
    if level >= 1:  # the children are one line each (an int written in place: most of a row)
        flats = [int.__repr__(v) if type(v) is int else _flat(v, seen) for v in items]
        if is_dict and 7 * len(value) > room:  # too many items for one line (each takes >= 7): a row
            return _opened(value, flats, inner, pad), ""
        kids = None
    else:
        kids = [_pretty(v, level + 1, inner, seen) for v in items]
        flats = [f for _, f in kids]
    fits = all(flats)  # "": a child too long for one line
    if is_dict:
        keys = [_key(k) for k in value]
        if fits and sum(map(len, keys)) + sum(map(len, flats)) + 4 * len(flats) <= room:
            flat = "{" + ", ".join([f"{k}: {f}" for k, f in zip(keys, flats)]) + "}"
            return [flat], flat
    elif fits and sum(map(len, flats)) + 2 * len(flats) <= room:
        flat = "[" + ", ".join(flats) + "]"
        return [flat], flat
    if kids is None:
        return _opened(value, flats, inner, pad), ""
    out = ["{\n" if is_dict else "[\n"]
    leads = _leads(value, inner) if isinstance(value, dict) else None
    for i, (printed, _) in enumerate(kids):
        if i:
            out.append(",\n")
        out.append(leads[i] if leads is not None else inner)
        out += printed
    out.append("\n" + pad + ("}" if is_dict else "]"))
    return out, ""


def _opened(value: Any, flats: list[str], inner: str, pad: str) -> list[str]:
    """A container printed one child a line, its children given on one line each."""
    if isinstance(value, dict):
        lines = ",\n".join([h + f for h, f in zip(_leads(value, inner), flats)])
        return ["{\n", lines, "\n" + pad + "}"]
    return ["[\n", ",\n".join([inner + f for f in flats]), "\n" + pad + "]"]


def _leads(value: dict, inner: str) -> list[str]:
    """Each key's start of line ('    "key": '), kept per indent: a sweep's rows repeat them."""
    lead = _LEADS.get(inner)
    if lead is None:
        lead = _LEADS.setdefault(inner, {})
    return [lead.get(k) or _lead(lead, inner, k) for k in value]


_KEYS: dict[str, str] = {}  # a key as JSON, kept: a sweep's rows repeat the same keys
_LEADS: dict[str, dict[Any, str]] = {}  # per indent, a key's printed start of line ('  "key": ')


def _lead(lead: dict[Any, str], inner: str, k: Any) -> str:
    text = inner + _key(k) + ": "
    if len(lead) < 4096:
        lead[k] = text
    return text


def _key(k: Any) -> str:
    text = str(k)
    encoded = _KEYS.get(text)
    if encoded is None:
        encoded = _figures(_ENCODE(text))
        if len(_KEYS) < 4096:
            _KEYS[text] = encoded
    return encoded


def _flat(value: Any, seen: dict[int, tuple[Any, str]]) -> str:
    """``value`` on one line; a non-empty container is encoded once per object (``seen``)."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)  # as json writes an int; no text, so no byte count in it
    if kind is str:
        return _figures(_ESCAPE(value))
    if value is None:
        return "null"
    if kind is float:
        return _ENCODE(value)  # no text, so no byte count in it
    if (kind is not dict and kind is not list) or not value:
        return "[]" if kind is list else "{}" if kind is dict else _figures(_ENCODE(value))
    hit = seen.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    flat = _figures(_ENCODE(value))
    seen[id(value)] = (value, flat)
    return flat


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


def to_rich(doc: Document, width: int | None = None, colour: bool | None = None) -> str:
    """The document as terminal text (``kvcalc.render.text.to_text``: fits ``width`` columns,
    default the terminal's; colour only on a TTY without NO_COLOR). The name is historical:
    tables are laid out by kvcalc itself, so table output does not import rich."""
    from kvcalc.render.text import to_text

    return to_text(cleaned(doc), width=width, colour=colour)


def cleaned(doc: Document) -> Document:
    """The document with every text through ``clean`` (control characters shown as escapes)."""

    def c(v: Any) -> Any:
        return clean(v) if isinstance(v, str) else v

    doc.title = clean(doc.title)
    doc.facts = [(clean(label), c(value)) for label, value in doc.facts]
    doc.notes = [clean(n) for n in doc.notes]
    for t in doc.tables:
        t.title = clean(t.title)
        t.columns = [c(col) for col in t.columns]
        t.rows = [[c(cell) for cell in row] for row in t.rows]
    for sub in doc.sections:
        cleaned(sub)
    return doc


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


def with_units(doc: Document, units: str = "iec") -> Document:
    """The document with every byte count kept as data in its texts (``core.units.figure``)
    shown in ``units``: a budget term's source, a note, a fact."""
    from kvcalc.core.units import show_figures

    def fix(v: Any) -> Any:
        return show_figures(v, units) if isinstance(v, str) else v

    doc.title = fix(doc.title)
    doc.facts = [(label, fix(value)) for label, value in doc.facts]
    doc.notes = [fix(n) for n in doc.notes]
    for t in doc.tables:
        t.rows = [[fix(c) for c in row] for row in t.rows]
    for sub in doc.sections:
        with_units(sub, units)
    return doc


def render(fmt: str, payload: Any, doc: Document | None) -> str:
    if fmt == "json" or doc is None:
        return to_json(payload)
    doc = with_units(without_repeats(doc))  # figures a builder left are shown in IEC units
    if fmt == "markdown":
        return to_markdown(doc)
    return to_rich(doc)
