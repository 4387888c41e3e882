"""Time `kvcalc compare` over 4 models x 5 TP sizes x 2 KV dtypes (40 rows) rendered as one table.

Goal (issue 5): well under a second. Run: python3 benchmarks/compare_sweep.py
Prints the in-process time (resolve + 40 evaluations + one Rich table) and the wall time of
the same command as a fresh `kvcalc` process (Python start-up and imports included).
"""

from __future__ import annotations

import subprocess
import sys
import time

MODELS = ["llama-3.1-70b", "qwen3-32b", "qwen3-8b", "llama-3.1-8b"]
ARGS = [*MODELS, "--tp", "1,2,4,8,16", "--kv-dtype", "bfloat16,fp8", "--tokens", "32768", "--gpu", "H100-80GB"]


def in_process() -> tuple[float, int, int]:
    from kvcalc.app.compare import ModelInput, compare, parse_list
    from kvcalc.render import to_rich
    from kvcalc.render.compare import compare_document, table_width
    from kvcalc.app.service import Settings
    from kvcalc.sources.resolve import resolve

    t0 = time.perf_counter()
    inputs = [ModelInput(m, (r := resolve(m)).spec, r.checkpoint) for m in MODELS]
    sweeps = {"tp": parse_list("1,2,4,8,16", "--tp"), "kv_dtype": parse_list("bfloat16,fp8", "--kv-dtype", str)}
    result = compare(inputs, Settings(tokens=32768, gpu="H100-80GB"), sweeps)
    doc = compare_document(result)
    text = to_rich(doc, width=table_width(doc))
    return time.perf_counter() - t0, len(result.rows), len(text.splitlines())


def main() -> None:
    best = None
    for _ in range(3):
        dt, n, lines = in_process()
        best = dt if best is None else min(best, dt)
    print(f"in-process: {n} rows, one table of {lines} lines, best of 3: {best * 1000:.0f} ms")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kvcalc", "compare", *ARGS], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        print(proc.stderr, file=sys.stderr)
        sys.exit(proc.returncode)
    print(f"kvcalc compare {' '.join(ARGS)}: {wall * 1000:.0f} ms wall (fresh process)")


if __name__ == "__main__":
    main()
