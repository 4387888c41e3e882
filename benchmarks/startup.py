"""Start-up of `kvcalc size PRESET --format json` and of its table output against a bare
one-command typer app.

Runs them interleaved (so machine noise hits them alike) and prints the medians and the
ratios. Goals: JSON <= 1.2x, table <= 1.5x. kvcalc pauses Python's cyclic garbage collector
while it starts (kvcalc/cli/__init__.py), which the bare app does not; so the ratios against
the same bare app with the same pause (bare_typer_gc_paused.py) are printed too: they are
what kvcalc's own modules and options cost over typer.   Usage: python benchmarks/startup.py [runs]
In a checkout with PYTHONDONTWRITEBYTECODE=1, run `python3 -m compileall -q kvcalc` first.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str]) -> float:
    """CPU seconds (user + system) the command used: unlike wall time, this does not grow when
    other processes share the machine's cores (wall time is printed too)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    WALL.setdefault(tuple(cmd), []).append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


WALL: dict[tuple[str, ...], list[float]] = {}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    exe = shutil.which("kvcalc")
    kvcalc = [exe] if exe else [sys.executable, "-m", "kvcalc"]
    ours = kvcalc + ["size", "qwen3-0.6b", "--format", "json"]
    table = kvcalc + ["size", "qwen3-0.6b"]
    bare = [sys.executable, str(HERE / "bare_typer.py")]
    paused = [sys.executable, str(HERE / "bare_typer_gc_paused.py")]
    for cmd in (ours, table, bare, paused):  # warm the file cache
        timed(cmd)
    a, t, b, p = [], [], [], []
    for _ in range(runs):
        a.append(timed(ours))
        t.append(timed(table))
        b.append(timed(bare))
        p.append(timed(paused))
    ma, mt, mb, mp = (statistics.median(x) for x in (a, t, b, p))
    wall = [statistics.median(WALL[tuple(c)]) * 1000 for c in (ours, table, bare, paused)]
    print(f"CPU time (user + system), medians over {runs} runs; wall time in brackets")
    print(f"kvcalc size qwen3-0.6b --format json: {ma * 1000:.1f} ms ({wall[0]:.1f} ms)")
    print(f"kvcalc size qwen3-0.6b (table):       {mt * 1000:.1f} ms ({wall[1]:.1f} ms)")
    print(f"bare one-command typer app:           {mb * 1000:.1f} ms ({wall[2]:.1f} ms)")
    print(f"the same, collector paused as kvcalc: {mp * 1000:.1f} ms ({wall[3]:.1f} ms)")
    print(f"ratio json: {ma / mb:.3f} (goal <= 1.2); against the paused bare app: {ma / mp:.3f}")
    print(f"ratio table: {mt / mb:.3f} (goal <= 1.5); against the paused bare app: {mt / mp:.3f}")


if __name__ == "__main__":
    main()
