"""Start-up of `kvcalc size PRESET --format json` against a bare one-command typer app.

Runs both interleaved (so machine noise hits both alike) and prints the medians and
their ratio. Goal: ratio <= 1.2.   Usage: python benchmarks/startup.py [runs]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    exe = shutil.which("kvcalc")
    kvcalc = [exe] if exe else [sys.executable, "-m", "kvcalc"]
    ours = kvcalc + ["size", "qwen3-0.6b", "--format", "json"]
    bare = [sys.executable, str(HERE / "bare_typer.py")]
    for cmd in (ours, bare):  # warm the file cache
        timed(cmd)
    a, b = [], []
    for _ in range(runs):
        a.append(timed(ours))
        b.append(timed(bare))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"kvcalc size qwen3-0.6b --format json: median {ma * 1000:.1f} ms over {runs} runs")
    print(f"bare one-command typer app:           median {mb * 1000:.1f} ms")
    print(f"ratio: {ma / mb:.3f} (goal <= 1.2)")


if __name__ == "__main__":
    main()
