"""`kvcalc probe`: check kvcalc's formulas against what a machine actually does.

Four checks, each a list of measurements reported as predicted vs measured bytes (or
blocks, tokens, concurrency) with the difference, the tolerance and a verdict:

1. ``alloc``: the KV pool of one rank laid out as vLLM 0.33 allocates it, on CPU or CUDA
   (:mod:`kvcalc.probe.alloc`)
2. ``model_cache``: a real transformers model's own cache object after a prefill and
   decode steps (:mod:`kvcalc.probe.model_cache`)
3. ``engine``: vLLM itself, started with dummy weights (:mod:`kvcalc.probe.engine`)
4. ``vllm_log``: the figures a vLLM start-up log reports (:mod:`kvcalc.probe.vllm_log`)

Each check returns a :class:`kvcalc.app.probe_report.Check` (data only);
:mod:`kvcalc.render.probe` turns the report into JSON, tables and Markdown. torch and
transformers (the ``probe`` extra) are imported only inside the functions that need them;
a probe that cannot run here raises ``KvcalcError(..., exit_code=3)``.
"""

from __future__ import annotations

from kvcalc.app.probe_report import Check, ProbeReport, Row

__all__ = ["Check", "ProbeReport", "Row"]
