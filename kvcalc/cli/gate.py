"""`kvcalc gate`: capacity gates for CI (exit 0 all pass, 1 a promise failed, 2 the file is wrong)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli import options as o

GateFileArg = Annotated[
    Optional[str], typer.Argument(help="Gate file (YAML): deployments and the capacity promised for each; - reads stdin")
]
Init = Annotated[bool, typer.Option("--init", help="Print a commented example gate file and exit")]
Junit = Annotated[Optional[Path], typer.Option("--junit", help="Also write JUnit XML: one testcase per promise")]
MarkdownOut = Annotated[Optional[Path], typer.Option("--markdown", help="Also write the summary table as Markdown")]


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)


_EMITTED = [False]  # the report's document is on stdout: a later error adds no second document


def _json_errors(fn):  # noqa: ANN001, ANN202 - a decorator keeping fn's signature for typer
    """With --format json, any error that stops the gate still prints the error document
    (docs/gate.md) on stdout before the one line on stderr and exit 2."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        from kvcalc.errors import KvcalcError

        _EMITTED[0] = False
        try:
            return fn(*args, **kw)
        except KvcalcError as exc:
            if str(kw.get("format", "")).strip().lower() == "json" and not _EMITTED[0]:
                from kvcalc.render import gate as rg
                from kvcalc.render import render

                o.emit(render("json", rg.error_payload(kw.get("file") or "", [exc.message]), None))
            raise

    return run


def _stderr(lines: list[str]) -> None:
    import sys

    for line in lines:
        sys.stderr.write(f"kvcalc: error: {line}\n")
    sys.stderr.flush()


def _github(summary_md: str, notes: list[str], *, to_stderr: bool) -> None:
    """GITHUB_STEP_SUMMARY gets the Markdown appended; with GITHUB_ACTIONS set, failures become
    ::error annotations (on stdout, or on stderr when stdout carries JSON)."""
    import os
    import sys

    from kvcalc.errors import KvcalcError

    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(summary_md + "\n")
        except OSError as exc:
            raise KvcalcError(f"GITHUB_STEP_SUMMARY {target!r} cannot be written: {exc.strerror or exc}") from None
    if os.environ.get("GITHUB_ACTIONS") and notes:
        stream = sys.stderr if to_stderr else sys.stdout
        stream.write("".join(n + "\n" for n in notes))
        stream.flush()


@_json_errors
def gate(
    file: GateFileArg = None,
    init: Init = False,
    junit: Junit = None,
    markdown: MarkdownOut = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Check capacity promises (concurrency, pool tokens, KV per GPU, headroom) of every deployment in a gate file."""
    from kvcalc.app.gate import evaluate_gate
    from kvcalc.app.gate_schema import GateFileError, load_gate_file
    from kvcalc.errors import EXIT_USAGE, KvcalcError
    from kvcalc.render import gate as rg
    from kvcalc.render import render
    from kvcalc.sources.files import atomic_write_text
    from kvcalc.sources.gatefile import example

    if init:
        if file is not None:
            raise KvcalcError("--init prints an example and takes no gate file; run: kvcalc gate --init > capacity.yaml")
        o.emit(example())
        return
    if file is None:
        raise KvcalcError("give a gate file (kvcalc gate capacity.yaml), or --init to print an example")
    fmt = o.check_format(format)
    u = o.check_units(units)

    try:
        gate_file = load_gate_file(file)
    except GateFileError as exc:
        if junit is not None:
            atomic_write_text(junit, rg.junit_problems(exc.path, exc.problems))
        md = rg.problems_markdown(exc.path, exc.problems)
        if markdown is not None:
            atomic_write_text(markdown, md)
        _github(md, rg.problem_annotations(exc.path, exc.problems), to_stderr=fmt == "json")
        if fmt == "json":  # a JSON document even when the file is wrong (docs/gate.md)
            o.emit(render("json", rg.error_payload(exc.path, exc.lines()), None))
        _stderr(exc.lines())
        raise typer.Exit(EXIT_USAGE) from None

    with o.status("checking the gates"):
        report = evaluate_gate(gate_file)
    o.emit(render(fmt, rg.gate_payload(report, u), None if fmt == "json" else rg.gate_document(report, u)))
    _EMITTED[0] = True
    md = rg.markdown_summary(report, u)
    if junit is not None:
        atomic_write_text(junit, rg.junit_xml(report, u))
    if markdown is not None:
        atomic_write_text(markdown, md)
    _github(md, rg.annotations(report, u), to_stderr=fmt == "json")
    if report.problems:
        _stderr([p.text(report.path) for p in report.problems])
    if report.exit_code:
        raise typer.Exit(report.exit_code)
