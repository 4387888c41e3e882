"""`kvcalc gate`: the words of each outcome (figures, failure messages, the nearest settings),
the JSON contract, the table people read, JUnit XML, the GitHub step summary and ``::error``
annotations. Returns text, never prints."""

from __future__ import annotations

from typing import Any

from kvcalc.app.gate import TP_SEARCH_LIMIT, GateReport, Outcome, Suggestion
from kvcalc.app.gate_schema import PROMISES, Problem
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table, clean, to_markdown
from kvcalc.words import plural

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
            f"ERROR: {plural(len(report.problems), 'deployment problem')} — the file is wrong or a model cannot be "
            f"loaded; {c['passed']} of {c['promises']} promises passed"
        )
    if c["failed"]:
        failing = len({o.deployment for o in report.outcomes if o.status == "fail"})
        return f"FAILED: {c['failed']} of {c['promises']} promises failed in {failing} of {c['deployments']} deployments"
    return f"PASSED: all {c['promises']} promises of {c['deployments']} deployments hold"


def gate_payload(report: GateReport, units: str = "iec") -> dict[str, Any]:
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
                "message": message(o, units) or None,
                "suggestions": [{"key": s.key, "value": s.value, "actual": s.actual} for s in o.suggestions],
                "line": o.line,
                "rules": o.result.rules if o.result is not None else None,  # "vLLM 0.33", "SGLang 0.5.23"
            }
            for o in report.outcomes
        ],
        "errors": [p.text(report.path) for p in report.problems],
    }


def error_payload(path: str, errors: list[str]) -> dict[str, Any]:
    """The JSON document of a gate that could not run (the file is missing or wrong): the same
    keys as a report, no results, every problem under ``errors``; exit code 2."""
    return {
        "file": path,
        "result": "error",
        "exit_code": 2,
        "summary": {"deployments": 0, "promises": 0, "passed": 0, "failed": 0, "errors": len(errors)},
        "results": [],
        "errors": errors,
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
            key=2,
        )
    )
    bad = [o for o in report.outcomes if o.status != "pass"]
    if bad or report.problems:
        section = Document("Failures")
        for o in bad:
            if o.status == "fail":
                section.facts.append((f"{o.deployment} / {o.promise}", failure_message(o, units)))
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
    doc.facts.append(("result", f"ERROR: the gate file is wrong ({plural(len(problems), 'problem')}); nothing was checked"))
    section = Document("Problems")
    for p in problems:
        section.facts.append(("error", p.text(path)))
    doc.sections.append(section)
    return to_markdown(doc)


# ---------------------------------------------------------------- words


def show(key: str, value: Any, units: str = "iec") -> str:
    """A promise's figure for people: 8.25x, 1,048,576 (tokens), 1.5 GiB, 25.0%."""
    if value is None:
        return "-"
    kind = PROMISES[key].value
    if kind == "number":
        return f"{value:.2f}x"
    if kind == "count":
        return f"{value:,}"
    if kind == "size":
        text = format_bytes(int(value), units)
        if "." in text and abs(value) < (1 << 20):  # not a whole KiB: exact bytes, so 114,687 B != 112 KiB
            return f"{int(value):,} B"
        return text
    if kind == "fraction":
        return f"{value * 100:.1f}%"
    return "fits" if value else "does not fit"


def show_margin(key: str, value: Any, units: str = "iec") -> str:
    if value is None:
        return "-"
    kind = PROMISES[key].value
    sign = "+" if value >= 0 else "-"
    if kind == "number":
        return f"{sign}{abs(value):.2f}x"
    if kind == "count":
        return f"{sign}{abs(value):,}"
    if kind == "size":
        return f"{sign}{show(key, abs(value), units)}"
    if kind == "fraction":
        return f"{sign}{abs(value) * 100:.1f} pts"
    return f"{sign}{abs(value):,} tokens"


def show_required(key: str, required: Any, units: str = "iec", max_model_len: int | None = None) -> str:
    kind = PROMISES[key].kind
    if kind == "flag":
        return f"fits {max_model_len:,}" if max_model_len else "fits"
    return (">= " if kind == "min" else "<= ") + show(key, required, units)


def message(o: Outcome, units: str = "iec") -> str:
    """The words of an outcome: why it failed, why it could not be evaluated, or nothing."""
    if o.status == "fail":
        return failure_message(o, units)
    return o.reason


def failure_message(o: Outcome, units: str = "iec") -> str:
    """What is needed, what is available, and the nearest setting that passes (vLLM's error style)."""
    text = _shortfall(o.promise, o.required, o.actual, o.result, units).rstrip(". ")
    if o.suggestions:
        text += ". Nearest settings that pass: " + "; ".join(_suggestion_text(o.promise, s, units) for s in o.suggestions)
    else:
        text += f". No nearby setting passes (tried tp up to {TP_SEARCH_LIMIT}, gpu_memory_utilization up to 1.0, fp8 KV)"
    return text


def _shortfall(key: str, required: Any, actual: Any, result: Any, units: str) -> str:
    """What the promise needs and what the evaluation (a SizeResult) gives."""
    fp = result.footprint
    pool = result.pool
    L = int(result.max_model_len)

    def b(n: int) -> str:
        return format_bytes(int(n), units)

    where = ""
    if pool is not None:
        where = (
            f"{int(pool.num_blocks):,} blocks of {int(pool.block_size or fp.cache.block_size)} tokens, "
            f"{b(int(pool.num_blocks) * int(pool.bytes_per_block))} per GPU"
        )
    if key == "min_concurrency":
        return (
            f"{required:.2f}x concurrency at max_model_len {L:,} is needed, but the KV cache ({where}) "
            f"holds {actual:.2f}x"
        )
    if key == "min_max_tokens":
        return f"{required:,} tokens of KV cache are needed, but the pool ({where}) holds {actual:,}"
    if key == "min_kv_cache_size_tokens":
        return (
            f"a GPU KV cache size of {required:,} tokens is needed, but it is {actual:,} "
            f"({float(pool.max_concurrency):.2f}x concurrency x max_model_len {L:,}; {where})"
        )
    if key == "fits_max_model_len":
        if pool is not None and pool.error:
            return " ".join(str(pool.error).split())
        est = pool.estimated_max_model_len if pool is not None else None
        text = f"one request of max_model_len {L:,} does not fit the KV cache ({where})"
        return text + (f"; the estimated maximum model length is {int(est):,}" if est else "")
    if key == "min_headroom":
        cap = int(pool.num_blocks) * int(pool.bytes_per_block)
        left = "no pool" if actual is None else f"{actual * 100:.1f}%"
        return (
            f"{required * 100:.1f}% of the pool must stay free after {fp.traffic.description}, but it holds "
            f"{b(fp.block_rounded_bytes_per_rank)} of the {b(cap)} pool per GPU, leaving {left}"
        )
    if key == "max_kv_bytes_per_rank":
        return (
            f"{fp.traffic.description} needs {b(actual)} of KV cache per GPU (block-rounded), "
            f"more than the {b(required)} allowed"
        )
    return f"{b(actual)} of KV cache per token per GPU is needed, more than the {b(required)} allowed"


def _suggestion_text(key: str, s: Suggestion, units: str) -> str:
    if s.key == "max_model_len" and key == "fits_max_model_len":
        return f"max_model_len <= {s.value:,}"
    if s.key == "max_model_len":
        return f"max_model_len <= {s.value:,} ({show(key, s.actual, units)})"
    if s.key == "gpu_memory_utilization":
        return f"gpu_memory_utilization >= {s.value:.3f} ({show(key, s.actual, units)})"
    return f"{s.key} {s.value} ({show(key, s.actual, units)})"


# ---------------------------------------------------------------- JUnit XML


def _xml(root: Any) -> str:
    import xml.etree.ElementTree as ET

    for el in root.iter():  # XML 1.0 admits no control characters: names and messages are cleaned
        el.attrib.update({k: clean(v) for k, v in el.attrib.items()})
        if el.text is not None:
            el.text = clean(el.text)
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
                el.text = failure_message(o, units)
            elif o.status == "error":
                el = ET.SubElement(case, "error", message=o.reason, type="GateFileError")
                el.text = o.reason
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
    # control characters first shown as escapes: a name cannot end the command and start another
    return clean(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


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


def github_annotations(report: GateReport, units: str = "iec") -> list[str]:
    out = []
    for o in report.outcomes:
        if o.status == "fail":
            out.append(annotation(failure_message(o, units), f"kvcalc gate: {o.deployment} {o.promise}", report.path, o.line))
    for p in report.problems:
        out.append(annotation(p.text(report.path), "kvcalc gate: error", report.path, p.line))
    return out


def problem_annotations(path: str, problems: list[Problem] | tuple[Problem, ...]) -> list[str]:
    return [annotation(p.text(path), "kvcalc gate: wrong gate file", path, p.line) for p in problems]


def github_outputs(report: GateReport | None) -> str:
    """``name=value`` lines for GITHUB_OUTPUT: the result and the counts (None: the file is wrong)."""
    if report is None:
        return "result=error\nfailed=0\npassed=0\nerrors=0\nexit_code=2\n"
    result = {0: "pass", 1: "fail"}.get(report.exit_code, "error")
    c = _counts(report)
    return (
        f"result={result}\nfailed={c['failed']}\npassed={c['passed']}\nerrors={len(report.problems)}\n"
        f"exit_code={report.exit_code}\n"
    )
