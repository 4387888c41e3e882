"""`kvcalc gate`: the JSON contract, the table people read, JUnit XML, the GitHub step
summary and ``::error`` annotations. Returns text, never prints."""

from __future__ import annotations

from typing import Any

from kvcalc.app.gate import GateReport, Outcome, Problem, show, show_margin, show_required
from kvcalc.render import Document, Table, to_markdown

STATUS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}


def _counts(report: GateReport) -> dict[str, int]:
    return {
        "deployments": report.deployments,
        "promises": len(report.outcomes),
        "passed": report.count("pass"),
        "failed": report.count("fail"),
        "errors": report.count("error"),
    }


def verdict(report: GateReport) -> str:
    c = _counts(report)
    if report.problems:
        return (
            f"ERROR: {len(report.problems)} deployment problem(s) — the file is wrong or a model cannot be "
            f"loaded; {c['passed']} of {c['promises']} promises passed"
        )
    if c["failed"]:
        failing = len({o.deployment for o in report.outcomes if o.status == "fail"})
        return f"FAILED: {c['failed']} of {c['promises']} promises failed in {failing} of {c['deployments']} deployments"
    return f"PASSED: all {c['promises']} promises of {c['deployments']} deployments hold"


def gate_payload(report: GateReport) -> dict[str, Any]:
    result = {0: "pass", 1: "fail"}.get(report.exit_code, "error")
    return {
        "file": report.path,
        "result": result,
        "exit_code": report.exit_code,
        "summary": _counts(report),
        "results": [
            {
                "deployment": o.deployment,
                "model": o.model,
                "promise": o.promise,
                "required": o.required,
                "actual": o.actual,
                "margin": o.margin,
                "status": o.status,
                "message": o.message or None,
                "suggestions": [{"key": s.key, "value": s.value, "actual": s.actual} for s in o.suggestions],
                "line": o.line,
            }
            for o in report.outcomes
        ],
        "errors": [p.text(report.path) for p in report.problems],
    }


def rows(report: GateReport, units: str) -> list[list[str]]:
    out = []
    for o in report.outcomes:
        out.append(
            [
                o.deployment,
                o.promise,
                show_required(o.promise, o.required, units, o.max_model_len),
                show(o.promise, o.actual, units),
                show_margin(o.promise, o.margin, units),
                STATUS[o.status],
            ]
        )
    return out


def gate_document(report: GateReport, units: str = "iec") -> Document:
    doc = Document(f"Capacity gates: {report.path}")
    doc.facts.append(("result", verdict(report)))
    doc.tables.append(
        Table(
            "",
            ["deployment", "promise", "required", "actual", "margin", "result"],
            rows(report, units),
            align=["l", "l", "r", "r", "r", "l"],
        )
    )
    bad = [o for o in report.outcomes if o.status != "pass"]
    if bad or report.problems:
        section = Document("Failures")
        for o in bad:
            if o.status == "fail":
                section.facts.append((f"{o.deployment} / {o.promise}", o.message))
        for p in report.problems:
            section.facts.append(("error", p.text(report.path)))
        doc.sections.append(section)
    doc.notes = [
        "margin: room to spare (+) or shortfall (-) against the required value",
        "headroom = 1 - block-rounded KV of the traffic on the busiest GPU / (num_blocks x bytes_per_block)",
    ]
    return doc


def markdown_summary(report: GateReport, units: str = "iec") -> str:
    return to_markdown(gate_document(report, units))


def problems_markdown(path: str, problems: list[Problem] | tuple[Problem, ...]) -> str:
    doc = Document(f"Capacity gates: {path}")
    doc.facts.append(("result", f"ERROR: the gate file is wrong ({len(problems)} problem(s)); nothing was checked"))
    section = Document("Problems")
    for p in problems:
        section.facts.append(("error", p.text(path)))
    doc.sections.append(section)
    return to_markdown(doc)


# ---------------------------------------------------------------- JUnit XML


def _xml(root: Any) -> str:
    import xml.etree.ElementTree as ET

    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def junit_xml(report: GateReport, units: str = "iec") -> str:
    """One <testsuite> per deployment, one <testcase> per promise; failures and errors counted."""
    import xml.etree.ElementTree as ET

    c = _counts(report)
    root = ET.Element(
        "testsuites",
        name="kvcalc gate",
        tests=str(c["promises"]),
        failures=str(c["failed"]),
        errors=str(c["errors"]),
        time="0",
    )
    by_deployment: dict[str, list[Outcome]] = {}
    for o in report.outcomes:
        by_deployment.setdefault(o.deployment, []).append(o)
    for name, outcomes in by_deployment.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=name,
            tests=str(len(outcomes)),
            failures=str(sum(1 for o in outcomes if o.status == "fail")),
            errors=str(sum(1 for o in outcomes if o.status == "error")),
            skipped="0",
            time="0",
        )
        for o in outcomes:
            case = ET.SubElement(suite, "testcase", name=o.promise, classname=f"kvcalc.app.gate.{name}", time="0")
            case.set("file", report.path)
            if o.line:
                case.set("line", str(o.line))
            summary = (
                f"required {show_required(o.promise, o.required, units, o.max_model_len)}, "
                f"actual {show(o.promise, o.actual, units)}"
            )
            if o.status == "fail":
                el = ET.SubElement(case, "failure", message=summary, type="CapacityGateFailed")
                el.text = o.message
            elif o.status == "error":
                el = ET.SubElement(case, "error", message=o.message, type="GateFileError")
                el.text = o.message
            else:
                out = ET.SubElement(case, "system-out")
                out.text = f"{summary}, margin {show_margin(o.promise, o.margin, units)}"
    return _xml(root)


def junit_problems(path: str, problems: list[Problem] | tuple[Problem, ...]) -> str:
    """A wrong file as JUnit: one erroring testcase per problem, so CI shows why nothing ran."""
    import xml.etree.ElementTree as ET

    n = str(len(problems))
    root = ET.Element("testsuites", name="kvcalc gate", tests=n, failures="0", errors=n, time="0")
    suite = ET.SubElement(root, "testsuite", name=f"gate file {path}", tests=n, failures="0", errors=n, skipped="0", time="0")
    for i, p in enumerate(problems, 1):
        case = ET.SubElement(suite, "testcase", name=f"problem {i}", classname="kvcalc.app.gate.file", time="0")
        case.set("file", path)
        if p.line:
            case.set("line", str(p.line))
        el = ET.SubElement(case, "error", message=p.text(path), type="GateFileError")
        el.text = p.text(path)
    return _xml(root)


# ---------------------------------------------------------------- GitHub Actions


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(message: str, title: str, file: str | None = None, line: int | None = None) -> str:
    """A GitHub Actions workflow command: ::error file=F,line=N,title=T::message"""
    props = []
    if file and not file.startswith("<"):
        props.append(f"file={_escape_property(file)}")
        if line:
            props.append(f"line={line}")
    props.append(f"title={_escape_property(title)}")
    return f"::error {','.join(props)}::{_escape_data(message)}"


def annotations(report: GateReport) -> list[str]:
    out = []
    for o in report.outcomes:
        if o.status == "fail":
            out.append(annotation(o.message, f"kvcalc gate: {o.deployment} {o.promise}", report.path, o.line))
    for p in report.problems:
        out.append(annotation(p.text(report.path), "kvcalc gate: error", report.path, p.line))
    return out


def problem_annotations(path: str, problems: list[Problem] | tuple[Problem, ...]) -> list[str]:
    return [annotation(p.text(path), "kvcalc gate: wrong gate file", path, p.line) for p in problems]
