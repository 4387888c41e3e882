"""`kvcalc report`: a capacity review to read, share and paste into a design doc."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.app.settings import TABLE, Settings
from kvcalc.cli import options as o

Models = Annotated[list[str], typer.Argument(help="One or more models: preset names, config.json paths or Hub repo ids")]
Output = Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write: .html/.htm (self-contained), .md (SVG charts beside it) or .json")]
ReportFormat = Annotated[Optional[str], typer.Option("--format", "-f", help="html | markdown | json (default: from the -o suffix; markdown on stdout)")]
Force = Annotated[bool, typer.Option("--force", help="Replace an existing output file (and its chart files)")]
NoCharts = Annotated[bool, typer.Option("--no-charts", help="Leave the charts out (Markdown: no SVG files are written)")]

SUFFIXES = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json"}
FORMATS = {"html": "html", "htm": "html", "markdown": "markdown", "md": "markdown", "json": "json"}


def register(app: typer.Typer) -> None:
    o.command(app, "report", settings=TABLE)(report)


def choose_format(fmt: str | None, output: Path | None) -> str:
    from kvcalc.errors import KvcalcError

    chosen = None
    if fmt is not None:
        chosen = FORMATS.get(fmt.strip().lower())
        if chosen is None:
            raise KvcalcError(f"--format {fmt!r} is not known for a report; valid: html, markdown, json")
    if output is None:
        return chosen or "markdown"
    by_suffix = SUFFIXES.get(output.suffix.lower())
    if chosen is None:
        if by_suffix is None:
            raise KvcalcError(
                f"cannot tell the format of {str(output)!r} from its suffix; name it .html, .md or .json, or pass --format"
            )
        return by_suffix
    if by_suffix is not None and by_suffix != chosen:
        raise KvcalcError(f"--format {fmt} does not match the suffix of {str(output)!r}; drop one of them")
    return chosen


def _is_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (OSError, RuntimeError, ValueError):
        return False


def _progress(total: int):  # noqa: ANN202 - (callback, finish)
    """A Rich progress bar on stderr when stderr is a terminal; otherwise nothing."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(file=sys.stderr), transient=True,
    )
    bar.start()
    task = bar.add_task("evaluating", total=total)

    def tick(label: str) -> None:
        bar.update(task, advance=1, description=label[:60])

    return tick, bar.stop


def report(
    models: Models,
    output: Output = None,
    format: ReportFormat = None,
    force: Force = False,
    no_charts: NoCharts = False,
    settings: Settings = o.FROM_FLAGS,
    revision: o.Revision = None,
    units: o.Units = "iec",
) -> None:
    """A capacity review as one HTML file (inline charts) or Markdown (charts as SVG files beside it)."""
    from kvcalc.app.report import ModelInput, build_report, count_evaluations
    from kvcalc.render import to_json
    from kvcalc.render.report import render_report
    from kvcalc.render.report_json import report_payload
    from kvcalc.sources.files import atomic_write_many, check_output

    fmt = choose_format(format, output)
    u = o.check_units(units)

    # every target is checked before anything is computed or written
    targets: list[Path] = []
    stem = None
    if output is not None:
        targets.append(output)
        if fmt == "markdown" and not no_charts:
            stem = output.stem
            from kvcalc.render.report_charts import CHART_SLUGS

            targets += [output.with_name(f"{stem}-{s}.svg") for s in CHART_SLUGS]
        read = tuple(Path(m) for m in models if _is_file(m))  # a config the report reads is never its output
        for t in targets:  # exists without --force, a symlink, a folder, a missing folder: one line
            check_output(t, force=force, protect=read)

    inputs = []
    for name in models:
        r = o.resolve(name, revision=revision)
        inputs.append(ModelInput(r.spec, r.checkpoint, r.kind, r.source))
    command = "kvcalc report " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["report"] else ""
    tick, finish = _progress(count_evaluations(inputs, settings))
    try:
        rep = build_report(inputs, settings, command=command, progress=tick)
    finally:
        finish()

    if fmt == "json":
        files: dict[str, str] = {}
        text = to_json(report_payload(rep))
    else:
        text, files = render_report(rep, fmt, stem=stem, with_charts=not no_charts, units=u)
    if output is None:
        o.emit(text)
        return
    # the charts, then the report that shows them: nothing is renamed into place before every
    # file is written, and the report comes last
    atomic_write_many([*((output.with_name(n), svg) for n, svg in files.items()), (output, text)], force=force)
    written = [str(output)] + [str(output.with_name(n)) for n in files]
    sys.stderr.write(f"kvcalc: wrote {', '.join(written)}\n")
