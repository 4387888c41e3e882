"""A 200-row `kvcalc compare` sweep with a pool against one `kvcalc size` call with a pool,
side by side, each a fresh process (Python start-up and imports included).

Goal (issue 12): the sweep takes at most 1.5x the wall time of the single call.
Run: python3 benchmarks/compare_sweep.py [runs]

Both commands are run interleaved (machine noise hits both alike), JSON output; the
medians and their ratio are printed, with the row count of the sweep. The children may
write bytecode (PYTHONDONTWRITEBYTECODE is dropped for them), as an installed kvcalc has:
otherwise every run compiles every module it imports, and the sweep imports more.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

GOAL = 1.5
MODEL = "qwen3-8b"
# 4 TP sizes x 2 KV dtypes x 5 lengths x 5 batch sizes = 200 rows
SWEEP = ["--tp", "1,2,4,8", "--kv-dtype", "auto,fp8", "--tokens", "1024,4096,8192,16384,32768", "--batch", "1,2,4,8,16"]
COMMON = ["--gpu", "H100-80GB", "--format", "json"]


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall time, CPU time of the child, and its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), proc.stdout


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    exe = shutil.which("kvcalc")
    kvcalc = [exe] if exe else [sys.executable, "-m", "kvcalc"]
    single = [*kvcalc, "size", MODEL, *COMMON]
    sweep = [*kvcalc, "compare", MODEL, *SWEEP, *COMMON]
    out = timed(sweep)[2]  # warm the file cache, and count the rows
    data = json.loads(out)
    rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
    timed(single)
    a, b, ca, cb = [], [], [], []
    for _ in range(runs):
        wall, cpu, _ = timed(single)
        a.append(wall)
        ca.append(cpu)
        wall, cpu, _ = timed(sweep)
        b.append(wall)
        cb.append(cpu)
    ma, mb = statistics.median(a), statistics.median(b)
    mca, mcb = statistics.median(ca), statistics.median(cb)
    print(f"kvcalc size {MODEL} {' '.join(COMMON)}: median {ma * 1000:.0f} ms wall ({mca * 1000:.0f} ms CPU) over {runs} runs")
    print(f"kvcalc compare {MODEL} {' '.join(SWEEP + COMMON)} ({len(rows)} rows): median {mb * 1000:.0f} ms wall "
          f"({mcb * 1000:.0f} ms CPU)")
    print(f"ratio: {mb / ma:.2f} wall, {mcb / mca:.2f} CPU (goal <= {GOAL})")


if __name__ == "__main__":
    main()
