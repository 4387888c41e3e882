"""Exhaustive mutation sweep of the config loader (issue 9; the quick random version is tests/test_fuzz.py).

Every field of every bundled preset (nested ones included, plus fields the loader and the
estimates read that few presets have) x every mutation below, each evaluated as `kvcalc size`
would under four settings (defaults; the pool on an H100; TP 2 x PP 2 with traffic; a fixed
KV memory). Allowed outcomes: a result whose JSON is strict (no NaN/Infinity), or a one-line
KvcalcError. Anything else (another exception, a multi-line message, 5 s without an answer)
is counted and one example of each is printed. A wrong answer counts too (issue 17): for the
plain decoder families the independent oracle of tests/kvoracle.py gives the bytes per token
each mutated config must give, or that it must be refused (a field the mutation made invalid
must never be replaced by a default). Exit 1 when anything was found.

    python3 scripts/fuzz_configs.py            # in-process, about 4 minutes on one core
    python3 scripts/fuzz_configs.py --cli      # through the CLI (CliRunner), default flags only
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"

MUTATIONS = {
    "delete": None, "null": None, '"x"': "x", "-1": -1, "0": 0, "0.5": 0.5, "3": 3, "1e300": 1e300,
    "-1e300": -1e300, "2**70": 2**70, "10**400": 10**400, "100000": 100_000, "true": True, "[]": [], "{}": {},
    "[1]": [1], '["x"]': ["x"], "NaN": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
}


class Hang(BaseException):
    pass


def _alarm(*_):  # noqa: ANN002
    raise Hang()


def paths(cfg: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in cfg.items():
        out.append((*prefix, k))
        if isinstance(v, dict):
            out.extend(paths(v, (*prefix, k)))
    return out


def mutate(cfg: dict, path: tuple, label: str) -> dict:
    out = copy.deepcopy(cfg)
    d = out
    for k in path[:-1]:
        d = d[k]
    if label == "delete":
        d.pop(path[-1], None)
    else:
        d[path[-1]] = copy.deepcopy(MUTATIONS[label])
    return out


def _strict(name: str):  # noqa: ANN202
    raise ValueError(f"{name} in the JSON output")


def _oracle():  # noqa: ANN202 - the tests' independent oracle, and the key list it shares with them
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import kvoracle

    return kvoracle


def _cases():  # noqa: ANN202 - (preset name, original config, path, label, mutated config)
    from kvcalc.sources.presets import all_presets

    for name, preset in sorted(all_presets(include_user=False).items()):
        cfg = preset.load()["config"]
        keys = set(paths(cfg))
        nested = "text_config" if isinstance(cfg.get("text_config"), dict) else None
        for k in _oracle().EXTRA_KEYS:
            keys.add((k,))
            if nested:
                keys.add((nested, k))
        for path in sorted(keys, key=str):
            for label in MUTATIONS:
                yield name, cfg, path, label, mutate(cfg, path, label)


def _through_cli(app, runner, folder: Path, mutated: dict) -> tuple | None:  # noqa: ANN001
    f = folder / "config.json"
    f.write_text(json.dumps(mutated, allow_nan=True))
    signal.alarm(5)
    try:
        r = runner.invoke(app, ["size", str(f), "--format", "json"])
        err = r.stderr.strip()
        ok = r.exit_code == 0 or (r.exit_code == 2 and err.startswith("kvcalc: error:") and len(err.splitlines()) == 1)
        return None if ok else (f"exit {r.exit_code}", err[:100])
    except Hang:
        return ("hang", "")
    finally:
        signal.alarm(0)


def _in_process(mutated: dict, settings, expected, field: str, first: bool) -> tuple | None:  # noqa: ANN001
    """A bad outcome of one evaluation as (kind, detail), or None; ``expected``: the oracle's."""
    import kvoracle

    from kvcalc.app.service import evaluate
    from kvcalc.errors import KvcalcError
    from kvcalc.render import render
    from kvcalc.render.size import size_payload
    from kvcalc.sources.config import spec_from_config

    signal.alarm(5)
    try:
        spec = spec_from_config(mutated, name="fuzz", source="fuzz")
        out = render("json", size_payload(evaluate(spec, settings)), None)
        got = json.loads(out, parse_constant=_strict)["bytes_per_token"]
        if first and expected == kvoracle.REFUSE:
            return ("wrong answer", f"an invalid {field} was accepted")
        if first and isinstance(expected, int) and got != expected:
            return ("wrong answer", f"{field}: {got} B/token, the oracle says {expected}")
    except KvcalcError as exc:
        if "\n" in exc.message:
            return ("multi-line message", exc.message[:100])
    except Hang:
        return ("hang", "")
    except Exception as exc:  # noqa: BLE001 - what the sweep looks for
        return (type(exc).__name__, str(exc)[:100])
    finally:
        signal.alarm(0)
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", action="store_true", help="write each config to a file and run `kvcalc size FILE`")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import kvoracle

    from kvcalc.app.service import Settings

    settings = [Settings(), Settings(gpu="H100-80GB"), Settings(tp=2, pp=2, tokens=1000, batch=3), Settings(kv_cache_memory="1GiB")]
    if args.cli:
        from typer.testing import CliRunner

        from kvcalc.cli import build_app

        app, runner, folder = build_app(["size"]), CliRunner(), Path(tempfile.mkdtemp())
    signal.signal(signal.SIGALRM, _alarm)
    found: collections.Counter = collections.Counter()
    example: dict = {}
    runs = checked = 0
    t0 = time.perf_counter()
    for name, cfg, path, label, mutated in _cases():
        if args.cli:
            outcomes = [_through_cli(app, runner, folder, mutated)]
        else:
            expected = kvoracle.expected_bytes_per_token(cfg, mutated)
            checked += expected != kvoracle.SKIP
            outcomes = [_in_process(mutated, s, expected, path[-1], i == 0) for i, s in enumerate(settings)]
        runs += len(outcomes)
        for key in filter(None, outcomes):
            found[key] += 1
            example.setdefault(key, (name, path, label))
    dt = time.perf_counter() - t0
    mode = "through the CLI" if args.cli else f"in-process x {len(settings)} settings"
    print(f"{runs:,} runs ({mode}) in {dt:.0f} s, {checked:,} answers checked against the oracle: "
          f"{sum(found.values())} bad outcomes, {len(found)} distinct")
    for key, n in found.most_common():
        print(f"  {n:5d}  {key[0]}: {key[1]}  e.g. {example[key][:3]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
