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
Force = Annotated[bool, typer.Option("--force", help="Replace existing --junit / --markdown files")]


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


def _stderr(lines: list[str], kind: str = "error") -> None:
    import sys

    for line in lines:
        sys.stderr.write(f"kvcalc: {kind}: {line}\n")
    sys.stderr.flush()


def _annotate(notes: list[str], *, to_stderr: bool) -> None:
    """With GITHUB_ACTIONS set, failures become ::error annotations (on stdout, or on stderr
    when stdout carries JSON). They come before any side output, which cannot stop them."""
    import os
    import sys

    if os.environ.get("GITHUB_ACTIONS") and notes:
        stream = sys.stderr if to_stderr else sys.stdout
        stream.write("".join(n + "\n" for n in notes))
        stream.flush()


def _append(variable: str, text: str) -> str | None:
    """Append to the file named by the environment variable; the failure as a warning, or None."""
    import os

    target = os.environ.get(variable)
    if not target:
        return None
    try:
        with open(target, "a", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    except (OSError, ValueError) as exc:
        return f"{variable} {target!r} cannot be written: {getattr(exc, 'strerror', None) or exc}; the verdict stands"
    return None


def _side_outputs(files: list[tuple[Path, str]], summary_md: str, outputs: str) -> tuple[list[str], bool]:
    """--junit, --markdown, GITHUB_STEP_SUMMARY and GITHUB_OUTPUT, after the verdict: (warnings,
    whether a file the command line asked for could not be written)."""
    from kvcalc.errors import KvcalcError
    from kvcalc.sources.files import atomic_write_text

    warnings, failed = [], False
    for path, text in files:
        try:
            atomic_write_text(path, text, force=True)
        except KvcalcError as exc:
            warnings.append(exc.message)
            failed = True
    for variable, text in (("GITHUB_STEP_SUMMARY", summary_md + "\n"), ("GITHUB_OUTPUT", outputs)):
        why = _append(variable, text)
        if why:
            warnings.append(why)
    return warnings, failed


@_json_errors
def gate(
    file: GateFileArg = None,
    init: Init = False,
    junit: Junit = None,
    markdown: MarkdownOut = None,
    force: Force = False,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Check capacity promises (concurrency, pool tokens, KV per GPU, headroom) of every deployment in a gate file."""
    from kvcalc.app.gate import evaluate_gate
    from kvcalc.app.gate_schema import GateFileError, load_gate_file
    from kvcalc.errors import EXIT_OK, EXIT_USAGE, KvcalcError
    from kvcalc.render import gate as rg
    from kvcalc.render import render
    from kvcalc.sources.files import check_output
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
    outputs = [(p, flag) for p, flag in ((junit, "--junit"), (markdown, "--markdown")) if p is not None]
    protect = (Path(file),) if file != "-" else ()
    for path, _ in outputs:  # before anything is read: never the gate file, never an existing file without --force
        check_output(path, force=force, protect=protect)
    if junit is not None and markdown is not None and str(junit) == str(markdown):
        raise KvcalcError("--junit and --markdown name the same file; give two files")

    try:
        gate_file = load_gate_file(file)
    except GateFileError as exc:
        md = rg.problems_markdown(exc.path, exc.problems)
        _annotate(rg.problem_annotations(exc.path, exc.problems), to_stderr=fmt == "json")
        if fmt == "json":  # a JSON document even when the file is wrong (docs/gate.md)
            o.emit(render("json", rg.error_payload(exc.path, exc.lines()), None))
            _EMITTED[0] = True
        _stderr(exc.lines())
        files = [(p, rg.junit_problems(exc.path, exc.problems) if flag == "--junit" else md) for p, flag in outputs]
        warnings, _ = _side_outputs(files, md, rg.github_outputs(None))
        _stderr(warnings, "warning")
        raise typer.Exit(EXIT_USAGE) from None

    with o.status("checking the gates"):
        report = evaluate_gate(gate_file)
    o.emit(render(fmt, rg.gate_payload(report, u), None if fmt == "json" else rg.gate_document(report, u)))
    _EMITTED[0] = True
    md = rg.markdown_summary(report, u)
    _annotate(rg.github_annotations(report, u), to_stderr=fmt == "json")
    if report.problems:
        _stderr([p.text(report.path) for p in report.problems])
    files = [(p, rg.junit_xml(report, u) if flag == "--junit" else md) for p, flag in outputs]
    warnings, failed = _side_outputs(files, md, rg.github_outputs(report))
    _stderr(warnings, "warning")
    # the verdict's exit code stands; a passing gate whose --junit/--markdown was not written is exit 2
    code = report.exit_code if report.exit_code != EXIT_OK else (EXIT_USAGE if failed else EXIT_OK)
    if code:
        raise typer.Exit(code)
