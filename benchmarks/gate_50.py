"""Time `kvcalc gate` on a generated gate file of 50 deployments (goal: under 1 s).

    python3 benchmarks/gate_50.py            # all promises pass (the common CI case)
    python3 benchmarks/gate_50.py --failing  # every deployment fails a promise: nearest-setting searches run too

Prints the time to load + validate the YAML, to evaluate every promise, and to render the
table, the JSON, JUnit and the Markdown summary; then the whole command run in-process.
Not a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

MODELS = [
    ("qwen3-0.6b", {}),
    ("qwen3-8b", {}),
    ("llama-3.1-8b", {}),
    ("llama-3.1-70b", {"tp": 4}),
    ("mistral-7b-v0.1", {}),
    ("gemma-2-9b-it", {}),
    ("gemma-3-1b-it", {}),
    ("gpt-oss-20b", {}),
    ("deepseek-v2-lite", {"tp": 2}),
    ("qwen3-30b-a3b", {"tp": 2}),
]
GPUS = ["H100-80GB", "H200", "A100-80GB"]


def gate_file(n: int = 50, failing: bool = False) -> str:
    lines = [
        "defaults:",
        '  vllm_version: "0.33"',
        "  max_model_len: 8192",
        "  batch: 8",
        "  tokens: 2048",
        "deployments:",
    ]
    for i in range(n):
        model, extra = MODELS[i % len(MODELS)]
        lines += [f"  - name: dep-{i:02d}-{model}", f"    model: {model}"]
        if i % 2:
            lines.append(f"    gpu: {GPUS[i % len(GPUS)]}")
        else:
            lines.append(f"    kv_cache_memory: {8 + i % 5}GiB")
        for k, v in extra.items():
            lines.append(f"    {k}: {v}")
        lines += [
            f"    min_concurrency: {1000 if failing else 1}",
            "    min_max_tokens: 1024",
            "    min_kv_cache_size_tokens: 1024",
            "    fits_max_model_len: true",
            "    min_headroom: 0.05",
            "    max_kv_bytes_per_rank: 64GiB",
            "    max_bytes_per_token_per_rank: 1MiB",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    failing = "--failing" in sys.argv
    t0 = time.perf_counter()
    from kvcalc.app.gate import evaluate_gate
    from kvcalc.app.gate_schema import load_gate_file
    from kvcalc.render import gate as rg
    from kvcalc.render import render

    t_import = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "capacity.yaml"
        path.write_text(gate_file(failing=failing), encoding="utf-8")

        t1 = time.perf_counter()
        gf = load_gate_file(path)
        t2 = time.perf_counter()
        report = evaluate_gate(gf)
        t3 = time.perf_counter()
        render("table", rg.gate_payload(report), rg.gate_document(report))
        render("json", rg.gate_payload(report), None)
        rg.junit_xml(report)
        rg.markdown_summary(report)
        t4 = time.perf_counter()

        from typer.testing import CliRunner

        from kvcalc.cli import build_app

        app = build_app(["gate"])
        t5 = time.perf_counter()
        result = CliRunner().invoke(app, ["gate", str(path), "--junit", str(Path(tmp) / "r.xml")])
        t6 = time.perf_counter()

    c = {s: report.count(s) for s in ("pass", "fail", "error")}
    print(f"deployments: {len(gf.deployments)}, promises: {len(report.outcomes)} ({c}); exit code {result.exit_code}")
    print(f"import gate modules : {t_import * 1000:8.1f} ms")
    print(f"load + validate YAML: {(t2 - t1) * 1000:8.1f} ms")
    print(f"evaluate promises   : {(t3 - t2) * 1000:8.1f} ms")
    print(f"render all formats  : {(t4 - t3) * 1000:8.1f} ms")
    print(f"total (load..render): {(t4 - t1) * 1000:8.1f} ms  (goal < 1000 ms)")
    print(f"whole command       : {(t6 - t5) * 1000:8.1f} ms  (in-process, table + JUnit)")


if __name__ == "__main__":
    main()
