"""A small SVG chart writer: line charts and grouped bar charts as self-contained SVG text.

Pure string building, standard library only. Every chart is one ``<svg>`` element with
inline attributes (no stylesheet, no script, no external font), so the same text works
inline in an HTML page and as a standalone ``.svg`` file. Values are plain floats: callers
scale bytes to a unit first and pass a formatter for the tick labels.

    line_chart("KV per rank", [Series("qwen3-8b", [(0, 0), (8192, 1.1)])],
               x_label="context length (tokens)", y_label="GiB per rank",
               hlines=[HLine(38.4, "pool")], vlines=[VLine(32768, "max_model_len")])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from kvcalc.render import clean


def escape(text: str) -> str:
    """XML text with control characters shown as escapes (XML 1.0 admits none)."""
    return _escape(clean(text))


def quoteattr(text: str) -> str:
    return _quoteattr(clean(text))

# Okabe-Ito: distinguishable with the common colour-vision deficiencies
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
AXIS = "#333333"
GRID = "#e3e3e3"
MUTED = "#666666"

Formatter = Callable[[float], str]


def fmt_number(v: float) -> str:
    """Short tick text: 0, 0.5, 12, 1.5k, 32k, 1.2M (no trailing zeros)."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return _trim(v / div) + suffix
    return _trim(v)


def _trim(v: float) -> str:
    if v == int(v):
        return str(int(v))
    text = f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
    return text.rstrip("0").rstrip(".")


def fmt_tokens(v: float) -> str:
    """Token counts as people write them: 512, 4k, 32k, 128k, 1M (binary k: 1024)."""
    n = int(round(v))
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}k"
    return fmt_number(v)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 x 10^k apart) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("axis limits must be finite")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    if ticks[-1] < hi - step * 1e-9:  # pragma: no cover - the loop reaches hi
        ticks.append(ticks[-1] + step)
    return ticks


def binary_ticks(hi: float, count: int = 6) -> list[float]:
    """Ticks from 0 to ``hi`` a power of two apart (token axes: 0, 8k, 16k, 24k, 32k)."""
    if hi <= 0:
        return [0.0, 1.0]
    step = 1
    while hi / step > count:
        step *= 2
    n = math.ceil(hi / step - 1e-9)
    return [float(step * i) for i in range(n + 1)]


def power_ticks(lo: float, hi: float, base: int) -> list[float]:
    """Powers of ``base`` covering [lo, hi] (lo > 0)."""
    if lo <= 0 or hi <= 0:
        raise ValueError("a log axis needs positive values")
    a = math.floor(math.log(lo, base) + 1e-9)
    b = math.ceil(math.log(hi, base) - 1e-9)
    if b == a:
        b = a + 1
    return [float(base**k) for k in range(a, b + 1)]


@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    color: str | None = None
    dashed: bool = False
    markers: bool | None = None  # None: markers when there are at most 24 points


@dataclass
class HLine:
    y: float
    label: str
    color: str = "#B22222"


@dataclass
class VLine:
    x: float
    label: str
    color: str = "#555555"


@dataclass
class BarSeries:
    name: str
    values: Sequence[float | None]  # one per category; None draws "n/a"
    marks: Sequence[str | None] = field(default_factory=list)  # a note under the value, e.g. "replicated"
    color: str | None = None


@dataclass
class _Frame:
    """Plot area and the two axis mappings."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_lo: float = 0.0
    x_hi: float = 1.0
    y_lo: float = 0.0
    y_hi: float = 1.0
    x_scale: str = "linear"
    y_scale: str = "linear"

    @property
    def plot_w(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> int:
        return self.height - self.top - self.bottom

    def _t(self, v: float, lo: float, hi: float, scale: str) -> float:
        if scale != "linear":
            base = 2 if scale == "log2" else 10
            v, lo, hi = (math.log(max(v, 1e-300), base) for v in (v, lo, hi))
        return 0.0 if hi == lo else (v - lo) / (hi - lo)

    def px(self, x: float) -> float:
        return self.left + self._t(x, self.x_lo, self.x_hi, self.x_scale) * self.plot_w

    def py(self, y: float) -> float:
        return self.top + (1 - self._t(y, self.y_lo, self.y_hi, self.y_scale)) * self.plot_h


def _n(v: float) -> str:
    """Coordinates with at most 2 decimals."""
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, s: str, *, size: int = 12, anchor: str = "start", color: str = AXIS,
          weight: str = "normal", rotate: int | None = None, cls: str | None = None, halo: bool = False) -> str:
    attrs = [f'x="{_n(x)}"', f'y="{_n(y)}"', f'font-size="{size}"', f'text-anchor="{anchor}"', f'fill="{color}"']
    if halo:  # a white outline under the glyphs keeps a label readable where it crosses a line
        attrs.append('stroke="#ffffff" stroke-width="3" paint-order="stroke" stroke-linejoin="round"')
    if weight != "normal":
        attrs.append(f'font-weight="{weight}"')
    if rotate is not None:
        attrs.append(f'transform="rotate({rotate} {_n(x)} {_n(y)})"')
    if cls:
        attrs.append(f'class="{cls}"')
    return f"<text {' '.join(attrs)}>{escape(s)}</text>"


def _open(width: int, height: int, title: str, kind: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label={quoteattr(title)} class="kvcalc-chart kvcalc-{kind}" font-family={quoteattr(FONT)}>',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        _text(width / 2, 22, title, size=15, anchor="middle", weight="bold"),
    ]


def _legend(items: list[tuple[str, str, str]], width: int, y: float) -> list[str]:
    """One centred row (wrapping) of swatches: (label, colour, style) with style line|dash|bar|hatch."""
    out = ['<g class="legend">']
    widths = [_legend_width(label) for label, _, _ in items]
    rows: list[list[int]] = [[]]
    used = 0
    for i, w in enumerate(widths):
        if rows[-1] and used + w > width - 40:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += w
    for r, row in enumerate(rows):
        total = sum(widths[i] for i in row)
        x = (width - total) / 2
        yy = y + r * 18
        for i in row:
            label, color, style = items[i]
            if style in ("bar", "hatch"):
                extra = ' fill-opacity="0.4" stroke-dasharray="3 2"' if style == "hatch" else ""
                out.append(f'<rect x="{_n(x)}" y="{_n(yy - 9)}" width="22" height="10" fill="{color}" '
                           f'stroke="{color}"{extra}/>')
            else:
                dash = ' stroke-dasharray="6 4"' if style == "dash" else ""
                out.append(f'<line x1="{_n(x)}" y1="{_n(yy - 4)}" x2="{_n(x + 22)}" y2="{_n(yy - 4)}" '
                           f'stroke="{color}" stroke-width="2.5"{dash}/>')
            out.append(_text(x + 28, yy, label, size=12))
            x += widths[i]
    out.append("</g>")
    return out


def _legend_width(label: str) -> int:
    """Swatch, gap and text at about 7.2 px per character of 12 px text, plus spacing."""
    return 52 + round(7.2 * len(label))


def _legend_height(items: list[tuple[str, str, str]], width: int) -> int:
    rows, used = 1, 0
    for label, _, _ in items:
        w = _legend_width(label)
        if used and used + w > width - 40:
            rows += 1
            used = 0
        used += w
    return 18 * rows


def _y_axis(f: _Frame, ticks: list[float], fmt: Formatter, label: str) -> list[str]:
    out = ['<g class="y-axis">']
    for t in ticks:
        y = f.py(t)
        out.append(f'<line x1="{f.left}" y1="{_n(y)}" x2="{f.left + f.plot_w}" y2="{_n(y)}" stroke="{GRID}"/>')
        out.append(_text(f.left - 8, y + 4, fmt(t), size=11, anchor="end", color=MUTED, cls="tick"))
    out.append(f'<line x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{f.top + f.plot_h}" stroke="{AXIS}"/>')
    out.append(_text(16, f.top + f.plot_h / 2, label, size=12, anchor="middle", rotate=-90, cls="axis-label"))
    out.append("</g>")
    return out


def _x_axis(f: _Frame, ticks: list[tuple[float, str]], label: str) -> list[str]:
    base = f.top + f.plot_h
    out = ['<g class="x-axis">', f'<line x1="{f.left}" y1="{base}" x2="{f.left + f.plot_w}" y2="{base}" stroke="{AXIS}"/>']
    for x, text in ticks:
        out.append(f'<line x1="{_n(x)}" y1="{base}" x2="{_n(x)}" y2="{base + 5}" stroke="{AXIS}"/>')
        out.append(_text(x, base + 18, text, size=11, anchor="middle", color=MUTED, cls="tick"))
    out.append(_text(f.left + f.plot_w / 2, base + 38, label, size=12, anchor="middle", cls="axis-label"))
    out.append("</g>")
    return out


LABEL_ROW = 15  # px between two rows of marker labels, and between two reference-line labels
CHAR_W = 6.6  # px per character of an 11 px label (a generous estimate: labels must not touch)


def _anchor(f: _Frame, x: float) -> str:
    return "end" if x > f.left + f.plot_w * 0.75 else ("start" if x < f.left + f.plot_w * 0.25 else "middle")


def label_extent(x: float, text: str, anchor: str) -> tuple[float, float]:
    """The horizontal extent of a label drawn at ``x`` with ``anchor``."""
    w = CHAR_W * len(text)
    return {"start": (x, x + w), "end": (x - w, x)}.get(anchor, (x - w / 2, x + w / 2))


def _vline_rows(f: _Frame, vlines: Sequence[VLine]) -> list[int]:
    """The row (0 = just above the plot) of each marker's label: a label that would overlap one
    already placed in a row goes one row up (staggered, never overprinted)."""
    placed: list[list[tuple[float, float]]] = []
    rows = []
    for v in vlines:
        x = f.px(v.x)
        lo, hi = label_extent(x, v.label, _anchor(f, x))
        row = next((i for i, r in enumerate(placed) if all(hi + 6 < a or lo - 6 > b for a, b in r)), len(placed))
        if row == len(placed):
            placed.append([])
        placed[row].append((lo, hi))
        rows.append(row)
    return rows


def _hline_label_ys(f: _Frame, hlines: Sequence[HLine]) -> list[float]:
    """Baselines of the reference lines' labels, just above each line (under it near the top
    edge), pushed apart so no two are closer than a label's height."""
    ys = [f.py(h.y) for h in hlines]
    want = [y + 14 if y - f.top < 16 else y - 5 for y in ys]
    order = sorted(range(len(ys)), key=lambda i: want[i])
    out = list(want)
    last = -1e9
    for i in order:
        out[i] = max(want[i], last + LABEL_ROW)
        last = out[i]
    return out


def _line_ticks(f: _Frame, xs: list[float], ys: list[float], x_ticks: Sequence[float] | None,
                y_from_zero: bool) -> tuple[list[float], list[float]]:
    """The ticks of both axes of a line chart; sets the frame's ranges."""
    x_scale, y_scale = f.x_scale, f.y_scale
    if x_ticks is not None and x_scale == "linear":
        xt = sorted(x_ticks)
        f.x_lo, f.x_hi = min(xt[0], min(xs)), max(xt[-1], max(xs))
    elif x_scale == "linear":
        xt = nice_ticks(min(0.0, min(xs)) if min(xs) >= 0 else min(xs), max(xs), 6)
        f.x_lo, f.x_hi = xt[0], xt[-1]
    else:
        xt = power_ticks(min(xs), max(xs), 2 if x_scale == "log2" else 10)
        f.x_lo, f.x_hi = min(xs), max(xs)
        if f.x_hi == f.x_lo:
            f.x_lo, f.x_hi = xt[0], xt[-1]
        xt = [t for t in xt if f.x_lo * (1 - 1e-9) <= t <= f.x_hi * (1 + 1e-9)]
        while len(xt) > 10:
            xt = xt[::2]
    if y_scale == "linear":
        lo = min(0.0, min(ys)) if y_from_zero else min(ys)
        yt = nice_ticks(lo, max(ys), 5)
    else:
        yt = power_ticks(min(ys), max(ys), 2 if y_scale == "log2" else 10)
        if len(yt) > 8:  # every k-th power, evenly spaced, the last one at or above the data
            k = math.ceil((len(yt) - 1) / 7)
            base = 2 if y_scale == "log2" else 10
            yt = [yt[0] * float(base) ** (k * i) for i in range(math.ceil((len(yt) - 1) / k) + 1)]
    f.y_lo, f.y_hi = yt[0], yt[-1]
    return list(xt), yt


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    hlines: Sequence[HLine] = (),
    vlines: Sequence[VLine] = (),
    x_scale: str = "linear",
    y_scale: str = "linear",
    x_format: Formatter = fmt_number,
    y_format: Formatter = fmt_number,
    width: int = 760,
    height: int = 400,
    y_from_zero: bool = True,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """Lines (one ``<polyline>`` per series), optional horizontal reference lines and
    vertical markers, nice ticks, axis labels and a legend."""
    for s in (x_scale, y_scale):
        if s not in ("linear", "log2", "log10"):
            raise ValueError(f"unknown scale {s!r}")
    pts = [p for s in series for p in s.points]
    xs = [p[0] for p in pts] + [v.x for v in vlines]
    ys = [p[1] for p in pts] + [h.y for h in hlines]
    if not xs or not ys:
        raise ValueError("a line chart needs at least one point")
    if any(not math.isfinite(v) for v in xs + ys):
        raise ValueError("chart values must be finite")
    items = [(s.name, s.color or PALETTE[i % len(PALETTE)], "dash" if s.dashed else "line") for i, s in enumerate(series)]
    items += [(h.label, h.color, "dash") for h in hlines]
    legend_h = _legend_height(items, width)
    band = 18 if vlines else 0  # the vertical markers' labels sit in a band above the plot
    f = _Frame(width, height, left=78, right=28, top=36 + legend_h + 8 + band, bottom=56, x_scale=x_scale,
               y_scale=y_scale)

    xt, yt = _line_ticks(f, xs, ys, x_ticks, y_from_zero)

    rows = _vline_rows(f, vlines)
    f.top += LABEL_ROW * (max(rows, default=0))  # staggered marker labels get more rows above the plot
    out = _open(width, height, title, "line")
    out += _legend(items, width, 36 + 14)
    out += _y_axis(f, yt, y_format, y_label)
    out += _x_axis(f, [(f.px(t), x_format(t)) for t in xt], x_label)
    for v, row in zip(vlines, rows):
        x = f.px(v.x)
        out.append(f'<line class="vline" x1="{_n(x)}" y1="{f.top}" x2="{_n(x)}" y2="{f.top + f.plot_h}" '
                   f'stroke="{v.color}" stroke-width="1.5" stroke-dasharray="4 3"/>')
        top = f.top - LABEL_ROW * row
        out.append(f'<line x1="{_n(x)}" y1="{top - 4}" x2="{_n(x)}" y2="{f.top}" stroke="{v.color}" stroke-width="1.5"/>')
        out.append(_text(x, top - 7, v.label, size=11, anchor=_anchor(f, x), color=v.color, cls="vline-label"))
    for h, y_label_at in zip(hlines, _hline_label_ys(f, hlines)):
        y = f.py(h.y)
        out.append(f'<line class="hline" x1="{f.left}" y1="{_n(y)}" x2="{f.left + f.plot_w}" y2="{_n(y)}" '
                   f'stroke="{h.color}" stroke-width="2" stroke-dasharray="8 4"/>')
        out.append(_text(f.left + f.plot_w - 4, y_label_at, h.label, size=11, anchor="end",
                         color=h.color, halo=True, cls="hline-label"))
    for i, line in enumerate(series):
        color = line.color or PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{_n(f.px(x))},{_n(f.py(y))}" for x, y in line.points)
        dash = ' stroke-dasharray="7 4"' if line.dashed else ""
        out.append(f'<polyline class="series" data-name={quoteattr(line.name)} points="{coords}" fill="none" '
                   f'stroke="{color}" stroke-width="2.5" stroke-linejoin="round"{dash}/>')
        if line.markers if line.markers is not None else len(line.points) <= 24:
            for x, y in line.points:
                out.append(f'<circle class="marker" cx="{_n(f.px(x))}" cy="{_n(f.py(y))}" r="3" fill="{color}"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[BarSeries],
    *,
    x_label: str,
    y_label: str,
    y_format: Formatter = fmt_number,
    value_format: Formatter | None = None,
    mark_legend: str | None = None,
    width: int = 760,
    height: int = 400,
) -> str:
    """Grouped bars: one group per category, one bar (``<rect class="bar">``) per series.
    A bar with a mark is drawn faded with a dashed outline and its mark written above it."""
    if not categories:
        raise ValueError("a bar chart needs at least one category")
    for s in series:
        if len(s.values) != len(categories):
            raise ValueError(f"series {s.name!r} has {len(s.values)} values for {len(categories)} categories")
    vals = [v for s in series for v in s.values if v is not None]
    if any(not math.isfinite(v) or v < 0 for v in vals):
        raise ValueError("bar values must be finite and non-negative")
    items = [(s.name, s.color or PALETTE[i % len(PALETTE)], "bar") for i, s in enumerate(series)]
    if mark_legend and any(m for s in series for m in s.marks):
        items.append((mark_legend, "#888888", "hatch"))
    legend_h = _legend_height(items, width)
    f = _Frame(width, height, left=78, right=28, top=36 + legend_h + 8, bottom=56)
    yt = nice_ticks(0.0, max(vals, default=1.0) * 1.12 or 1.0, 5)
    f.y_lo, f.y_hi = yt[0], yt[-1]
    vf = value_format or y_format

    out = _open(width, height, title, "bar")
    out += _legend(items, width, 36 + 14)
    out += _y_axis(f, yt, y_format, y_label)
    group_w = f.plot_w / len(categories)
    bar_w = min(56.0, group_w * 0.8 / max(1, len(series)))
    centres = [f.left + group_w * (i + 0.5) for i in range(len(categories))]
    out += _x_axis(f, [(c, cat) for c, cat in zip(centres, categories, strict=True)], x_label)
    base = f.top + f.plot_h
    for si, s in enumerate(series):
        color = s.color or PALETTE[si % len(PALETTE)]
        for ci, v in enumerate(s.values):
            x = centres[ci] - bar_w * len(series) / 2 + si * bar_w
            mark = s.marks[ci] if ci < len(s.marks) else None
            if v is None:
                out.append(_text(x + bar_w / 2, base - 6, "n/a", size=10, anchor="middle", color=MUTED, cls="na"))
                continue
            y = f.py(v)
            extra = ' fill-opacity="0.4" stroke-dasharray="3 2"' if mark else ""
            out.append(f'<rect class="bar" data-series={quoteattr(s.name)} x="{_n(x + 1)}" y="{_n(y)}" '
                       f'width="{_n(bar_w - 2)}" height="{_n(base - y)}" fill="{color}" stroke="{color}"{extra}/>')
            out.append(_text(x + bar_w / 2, y - (17 if mark else 5), vf(v), size=10, anchor="middle", cls="value"))
            if mark:
                out.append(_text(x + bar_w / 2, y - 5, mark, size=9, anchor="middle", color=MUTED, cls="mark"))
    out.append("</svg>")
    return "\n".join(out) + "\n"
