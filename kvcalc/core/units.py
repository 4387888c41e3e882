"""Byte sizes at the edge: parse '80GiB' / '79.1GiB' / '80GB' / '1234', format with a
labelled unit (IEC by default, SI only when asked)."""

from __future__ import annotations

import re

from kvcalc.errors import KvcalcError

IEC = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
SI = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3))
_FACTORS = {name.lower(): f for name, f in IEC + SI} | {"b": 1, "": 1, "kb": 10**3, "k": 10**3}
_FACTORS |= {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40, "m": 10**6, "g": 10**9, "t": 10**12}
# the largest size kvcalc takes: 1 EiB, beyond any GPU, pool or checkpoint (docs/hardening.md)
MAX_BYTES = 1 << 60
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, flag: str = "size") -> int:
    """Bytes from '80GiB', '79.1GiB', '80GB' (SI), '65.5GB', or a plain integer of bytes, up to
    ``MAX_BYTES`` (a larger size is an error: hundreds of digits overflow every float after)."""
    n = _parse_size(text, flag)
    if n > MAX_BYTES:
        raise KvcalcError(f"{flag} {_short(text)} is beyond any GPU or pool (limit 2**60 bytes = 1 EiB)")
    return n


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"


def _parse_size(text: str | int, flag: str) -> int:
    if isinstance(text, bool):
        raise KvcalcError(f"{flag} must be a size like 80GiB, 80GB or a number of bytes, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise KvcalcError(f"{flag} must not be negative, got {text}")
        return text
    if isinstance(text, float):
        text = repr(text)
    if len(str(text)) > 64:  # a size is a few characters; hundreds of digits are refused unread
        raise KvcalcError(f"{flag} must be a size like 80GiB, 80GB or a number of bytes, got {_short(text)}")
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _FACTORS:
        raise KvcalcError(
            f"{flag} must be a size like 80GiB, 79.1GiB, 80GB (SI) or a number of bytes, got {text!r}"
        )
    from decimal import Decimal, InvalidOperation  # exact decimal sizes; imported when a size is parsed

    try:
        value = Decimal(m.group(1)) * _FACTORS[m.group(2).lower()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise KvcalcError(f"{flag}: cannot read {text!r} as a size") from None
    return int(value.to_integral_value())


def format_bytes(n: int, units: str = "iec") -> str:
    """'112 KiB', '5.36 MiB', '79.1 GB' ... always labelled; exact integers stay exact."""
    table = SI if units == "si" else IEC
    sign = "-" if n < 0 else ""
    a = abs(n)
    for name, factor in table:
        if a >= factor:
            if a % factor == 0:
                return f"{sign}{a // factor} {name}"
            return f"{sign}{a / factor:.2f} {name}"
    return f"{sign}{a} B"


def gib(n: int) -> float:
    """vLLM's format_gib: GiB rounded to 2 decimals."""
    return round(n / (1 << 30), 2)


_FIGURE = "\x1e"  # brackets a byte count inside a text (a control character no input keeps)


def figure(n: int) -> str:
    """A byte count inside a sentence (a budget term's source, a note), kept as data: the
    output shows it in the output's own unit system (``show_figures``)."""
    return f"{_FIGURE}{int(n)}{_FIGURE}"


def show_figures(text: str, units: str = "iec") -> str:
    """Every ``figure(n)`` in ``text`` as ``format_bytes(n, units)``."""
    if _FIGURE not in text:
        return text
    import re

    return re.sub(_FIGURE + r"(\d{1,24})" + _FIGURE, lambda m: format_bytes(int(m.group(1)), units), text)
