"""Calibration suite: kvcalc's budget terms against real vLLM runs (tests/data/vllm-budget/
CALIBRATION.json), printed per run and per term (pytest -s shows the table).

The bounds below are what the terms as derived from vLLM's code reach on these runs today
(measured once, not fitted: no constant in kvcalc.core.budget_rules was tuned to them)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from kvcalc.app.budget_check import compare, predict, within
from kvcalc.app.settings import Settings
from kvcalc.sources.resolve import resolve

DATA = Path(__file__).parent / "data"
RUNS = json.loads((DATA / "vllm-budget" / "CALIBRATION.json").read_text())["runs"]


def _rows(run: dict) -> list:
    inputs = dict(run["inputs"])
    name = inputs.pop("model")
    model = resolve(str(DATA.parent.parent / name) if name.startswith("tests/") else name).spec
    stage = inputs.pop("stage", None)
    s = Settings().with_(**inputs)
    predicted, sources = predict(model, s, stage=stage)
    return compare(run["logged"], predicted, sources)


def _failed_start(run: dict) -> bool:
    """A run whose vLLM computed no KV memory (the figure printed is <= 0) and so did not start."""
    return float(run["logged"].get("available_kv_gib", 1)) <= 0


def calibration_table() -> list[tuple[str, object]]:
    out = []
    for run in RUNS:
        if not _failed_start(run):
            for row in _rows(run):
                out.append((run["id"], row))
    return out


def test_runs_vllm_could_not_start_are_refused() -> None:
    """Where the log shows vLLM left no memory for the KV cache (it then refuses to start), kvcalc
    refuses too, or predicts no memory: the outcome is compared, not a capacity figure."""
    from kvcalc.errors import PlanError

    failed = [run for run in RUNS if _failed_start(run)]
    for run in failed:
        try:
            rows = _rows(run)
        except PlanError as exc:
            assert "exceed the memory vLLM may use" in exc.message or "no memory" in exc.message.lower(), run["id"]
            continue
        avail = [r for r in rows if r.term == "available"]
        assert avail and avail[0].kvcalc_gib <= 0, run["id"]


def test_calibration_prints_and_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    table = calibration_table()
    with capsys.disabled():
        print(f"\n{'run':48} {'term':11} {'logged':>8} {'kvcalc':>8} {'error':>7}  ok")
        for run_id, r in table:
            print(f"{run_id:48} {r.term:11} {r.logged_gib:8.2f} {r.kvcalc_gib:8.2f} {r.error_gib:+7.2f}  "
                  f"{'yes' if within(r.error_gib, r.logged_gib) else 'NO'}")
    avail = [r for _, r in table if r.term == "available"]
    assert len(avail) >= 9
    rel = [abs(r.error_gib) / abs(r.logged_gib) for r in avail]
    hits = sum(within(r.error_gib, r.logged_gib) for r in avail)
    print(f"available: {hits}/{len(avail)} within max(2 %, 0.25 GiB); median |error| {statistics.median(rel):.1%}")
    # measured bounds (see docs/budget.md, "Calibration"); a change to a term must keep or improve them
    assert hits >= BOUND_HITS
    # runs whose logs show memory no term explains (an 'anomaly' with its reason) keep their own bound, so that the
    # bound on every other run stays tight
    own = {run["id"]: run["anomaly"]["bound_gib"] for run in RUNS if "anomaly" in run}
    rows = [(run_id, r) for run_id, r in table if r.term == "available"]
    assert max(abs(r.error_gib) for run_id, r in rows if run_id not in own) <= BOUND_MAX_GIB
    assert all(abs(r.error_gib) <= own[run_id] for run_id, r in rows if run_id in own)
    weights = [r for _, r in table if r.term == "weights"]
    assert all(abs(r.error_gib) <= BOUND_WEIGHTS_GIB for r in weights)


def test_no_log_is_counted_twice() -> None:
    """Two entries from one start would count one run twice: no two excerpts share a timestamped 'Model loading took'
    or 'Available KV cache memory' line (two copies of one log, found under two search-index ids, once were)."""
    import re

    seen: dict[str, str] = {}
    stamp = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d")
    for run in RUNS:
        path = DATA / run["log"] if run.get("log") else None
        if path is None or not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if ("Model loading took" in line or "Available KV cache memory" in line) and stamp.search(line):
                key = line.strip()
                assert seen.setdefault(key, run["id"]) == run["id"], (run["id"], seen[key], key)


def test_the_held_out_record_the_budget_quotes_is_docs_table() -> None:
    """The derived KV figure quotes the held-out record (kvcalc.app.budget.HELD_OUT_*): it must be docs/budget.md's
    cumulative row of sets 6-N, each predicted with the code of its day, as the HELDOUTnn.md files scored them."""
    import re

    from kvcalc.app.budget import HELD_OUT_RUNS, HELD_OUT_WITHIN

    doc = (Path(__file__).parent.parent / "docs" / "budget.md").read_text(encoding="utf-8")
    row = re.search(r"\| 6–\d+, each with the code of its day[^|]*\| (\d+) \| (\d+) \((\d+) %\)", doc)
    assert row, "docs/budget.md lost its cumulative held-out row"
    runs, hits, pct = map(int, row.groups())
    assert (HELD_OUT_WITHIN, HELD_OUT_RUNS) == (hits, runs)
    assert pct == round(100 * hits / runs)


def test_logged_figures_are_printed_in_the_cited_excerpts() -> None:
    """Provenance: each figure of a run that has a log excerpt is printed in that excerpt as stored
    (copied from the log, not derived), and the excerpt's first line names its source."""
    for run in RUNS:
        if not run["log"]:
            continue
        text = (DATA / run["log"]).read_text()
        assert text.startswith("# source: "), run["id"]
        for key, value in run["logged"].items():
            assert str(value) in text, (run["id"], key, value)

# measured 2026-11-30 with the 19 held-out runs of HELDOUT.md added (Gemma's tied LM head, the RTX
# 3090's CUDA total and MXFP4's padded Marlin experts on H100 fixed after that measurement):
# 33 of 39 available figures within max(2 %, 0.25 GiB). MXFP4 experts on H100 load through
# vLLM's padded Marlin kernel in 0.10.1-0.11.x pip installs (docs/vllm-budget.md, "gpt-oss on Hopper"):
# issue 23278's weights -0.04 GiB (was -5.27), issue 27508 +0.26 (was +5.49). Issue 14's gpt-oss-120b
# figure (3.33 GiB) matched before only because the weights were underestimated; with the native
# sampler its 20b run measured, 3.33 needs weights of 60.57 GiB or less, below the checkpoint's own
# 60.8 GiB, so its set-up differed from the inputs recorded (a Docker image with triton_kernels loads
# unpadded experts). Other misses: 0.31's transient peak (week10); NCCL's smaller PCIe buffers on 8
# L40S; the MoE profile peaks of Qwen3-30B-A3B and DeepSeek-V2-Lite (under-estimated by 0.5-0.6 GiB)
# 2nd held-out set (HELDOUT2.md, measured at d0c529c before the MXFP4 merge; none of its runs is
# MXFP4): 5 runs added, 4 within. The Llama-4-Scout TP4 run misses by +5.65 GiB (weights -5.75 GiB:
# the preset's partial config lacks vision_config among other fields), so the max-error and weights
# bounds admit it rather than dropping the run. All together: 37 of 44 within the bound, median 0.6 %; 38 once the fused-MoE workspace vLLM keeps from 0.14 on is charged to the profile peak (docs/vllm-budget.md 2.3.1); 39 once the Triton top-k/top-p
# sampler's cached SMs x vocab fp32 buffer (0.17.0-0.20.0) is charged too (2.3.2: Qwen3-30B-A3B's available +0.35 -> +0.27)
# 3rd held-out set (HELDOUT3.md, measured at eec7745 before any change; no code changed): 10 runs added,
# 9 within (8 RTX 3090 runs of one 0.17.1 study all +0.13..+0.25 GiB, the catalog's 23.70 GiB total vs the
# 23.54 GiB its OOM line prints; RTX 4090 Qwen3-8B 0.24.0 -0.30 GiB): 48 of 54 within. Then the RTX
# 3090's catalog total became vLLM's own 23.58 GiB (vllm#10517; tests/data/gpu-totals/SOURCES.md): the
# 3090 runs move to +0.05..+0.14, and the one run whose vLLM computed -0.70 GiB (it could not start) is
# checked as an outcome (test_runs_vllm_could_not_start_are_refused: kvcalc refuses it), not a figure:
# 47 of 53 capacity figures within, median 0.6 %.
# Then (docs/vllm-budget.md 2.2, 2.3.3): Llama-4-Scout's weights counted as vLLM 0.19 loads them (the shared
# expert, the 10,485,760-position RoPE table, the TP-sharded vision tower; -5.75 -> -0.03 GiB, available
# +5.40 -> -0.32) and the RoPE table of the other Llama/Qwen/Mixtral/Gemma-2 rows (Llama-3.1-8B -0.03 -> 0.00);
# model runner V2's profile in 0.22-0.25 for its default architectures (the RTX 4090 Qwen3-8B 0.24.0 run
# -0.30 -> +0.19): 49 of 53 within. Left: issue 14's gpt-oss-120b (-5.36), week10's 0.31 headroom (+1.14).
# 4th held-out set (HELDOUT4.md, measured at 37a0719 before any change; no code changed): 6 runs added, one of
# them a start vLLM refused (-1.44 GiB; checked as an outcome); of the 5 capacity figures 3 within (the two H100
# TP2 runs of the llm-d-benchmark set-up -1.75/-1.77 GiB: kvcalc charges NCCL NVLS buffers, the runs logged a
# non-torch figure without them): 50 of 58 capacity figures within, median 0.6 %. Bounds unchanged.
# Non-torch from the communicators vLLM sets up (docs/vllm-budget.md 2.4.2: snapshot before/after
# init_worker_distributed_environment, torch's TP group communicator connected in the profile run, NVLS only
# above 2 GPUs in NCCL 2.26/2.27, the FlashInfer fusion workspace from 0.17): 54 of 58 within, median 0.5 %;
# the largest error (gpt-oss-120b, -5.36) is unchanged, so BOUND_MAX_GIB stays.
# 5th held-out set (HELDOUT5.md, measured at c95a366 after the catalog gained RTX-A6000, RTX-6000-Ada and RTX-3060;
# no budget code changed): 7 runs added, 1 within (L40S Qwen3-14B 0.29.0 +1.60..+1.81 GiB, RTX 6000 Ada -2.64/-2.75
# GiB: the catalog's ECC-on 44.43 GiB total vs an ECC-off card, RTX 3060 u0.75 -0.90): 55 of 65 within, median 0.6 %;
# the largest error (gpt-oss-120b, -5.36) and the weights bound are unchanged.
# Then (docs/vllm-budget.md 2.2): the LLaVA-NeXT run resolves configs/llava-v1.6-mistral-7b-hf.json and its CLIP tower,
# projector, image_newline and Mistral's RoPE table are counted as vLLM 0.10.2 builds them (weights -0.59 -> -0.01);
# its torch peak (-0.41, the multimodal encoder's profile pass: 2.3.5) is unchanged; it has no available figure.
# Then (docs/vllm-budget.md 2.3.6): a cold torch.compile's autotune examples of the embedding kernel in the profile
# peak (the default; compile_cache "warm" on the runs whose timestamps show no compile: the RTX 3090 0.17.1 study,
# the A100-40GB 0.19.1 run, one planner run), model runner V2's penalty state in the 0.27+ free-memory delta, the
# 0.31 "peak activation" compared with profile peak + CUDA graphs; the RTX 4090 0.29.0 run of mondegreens/apron
# added (not held out): 56 of 66 within, median 0.5 %. Bounds unchanged but the hit count.
# 6th held-out set (HELDOUT6.md, predicted at ea6815e; no code changed after): 13 runs of one source (Llama-3.1-8B,
# 0.19.0, A100-40GB / RTX A6000 / H100 NVL / H100 PCIe), the compile cache as each log prints it: 13 within
# (10 with the cold default): 69 of 79 within, median 0.5 %.
# 7th held-out set (HELDOUT7.md, predicted at 14169bb; no code changed after): 6 runs of five sources, 5 within
# with the logged cache (6 with the cold default): 74 of 85 within, median 0.5 %.
# 8th held-out set (HELDOUT8.md, predicted at 59b99db; no code changed after): 9 runs of eight sources, 5 within with
# the logged cache (6 with the cold default; LoRA on two T4 runs, WSL2, a 0.26 dev build): 79 of 94, median 0.6 %.
# 9th held-out set (HELDOUT9.md, predicted at db706e9 after one fix made before any figure was read: the YaRN
# max_model_len of 0.9.2-0.29): 7 runs of three sources, 5 within (the same with either cache state): 84 of 101.
# The multimodal encoder pass modelled (docs/vllm-budget.md 2.3.5): the LLaVA-NeXT run's available figure compared
# from then on (+0.31, within; +0.44 without the term): 85 of 102.
# LoRA's stacked adapter buffers modelled (core/lora.py): the two T4 LoRA runs of HELDOUT8 get enable_lora as their
# logs print it; weights 7.64 -> 7.70 (logged 7.70, 7.71), available +0.26/+0.31 -> +0.20/+0.25: 87 of 102.
# 10th held-out set (HELDOUT10.md, predicted at 3f90627): 4 runs of three sources; MiniMax-M2.5 not modelled (no
# prediction, not in this file); 2 of the other 3 within (Qwen3-30B-A3B-FP8 with expert parallel +1.32): 89 of 105.
# CUDA-graph estimate: warm-up + capture of the largest graph, FA3's split accumulators on Hopper (0.20+), the
# 0.29+ V2 lines too: the L40S Qwen3-14B-AWQ 0.95 run +0.65 -> +0.59: 90 of 105. PyTorch's allocator blocks in the
# weights (Qwen weights now to the printed digit) and the per-graph cost measured from vLLM's estimates (3.4 MiB,
# was 2): L40S Qwen3-14B 0.29 +0.30 -> +0.19 (in), Qwen2-7B TP 2 on RTX 4090 0.25.1 -0.16 -> -0.28 (out): 90 of 105.
# 11th held-out set (HELDOUT11.md, predicted at 78b956e): 9 runs of six sources, 7 within: 97 of 114.
# 12th held-out set (HELDOUT12.md, predicted at bfb007a): 6 runs added (the granite-4.0-micro run is not modelled), 3 within
# as predicted; then FP8 under Marlin on GPUs without FP8 (A100 run weights -0.46 -> -0.03), Gemma 3's second RoPE
# table, and the FlashInfer sampler the A10G logs print: 102 of 120.
# 13th held-out set (HELDOUT13.md, predicted at f3cf548): 3 runs, 1 within (Qwen3-14B-AWQ on RTX 5090 0.28 +1.46): 103 of 123.
# Granite 4.0 read (granitemoehybrid: Mamba-2 state, shared MLP, experts): HELDOUT12's granite-4.0-micro run added
# (online FP8 on an L40S, 0.11.0), weights 3.4242 vs 3.4244 logged, available +0.24 (within): 104 of 124.
# Model runner V2 by default before 0.29 as each release decides it (0.25-0.28: every model that is not MoE or
# hybrid, not only the listed ones): Qwen2-7B TP 2 on RTX 4090 0.25.1 -0.28 -> within: 105 of 124.
# 14th held-out set (HELDOUT14.md, predicted at faf3ccc): 21 runs of eight sources, 17 within as predicted; with the
# V2 rule above, --sampler ignored where V2's dummy run applies no top-k/top-p, and the ROCm attention backends
# (the AITER-FA run was refused before), 19 within: 124 of 145.
# 15th held-out set (HELDOUT15.md, predicted at 44ec5ed): 10 runs of four sources, 9 within; the miss ran
# LLMEngine directly (vLLM's engine usage context: max_num_seqs 128), which its inputs now say: 134 of 155.
# 16th held-out set (HELDOUT16.md, predicted at b927d3d): 23 runs of 12 sources (5 more set aside from their
# inputs: GB10, WSL2), 13 within as predicted. Then Gemma 3's linear-scaling RoPE table (8 x 131072 rows) and the FP8
# MLP activation of W8A8 per-tensor FP8 under torch.compile; 22 runs added (the NVFP4 checkpoint, whose scheme
# kvcalc cannot be told, is not), 17 within: 151 of 177.
# 17th held-out set (HELDOUT17.md, predicted at 227e9ab): one run (T4, eager, plain AWQ), +0.36, outside: 151 of 178.
# 18th held-out set (HELDOUT18.md, predicted at db6121b after the catalog gained the A40 and the RTX 2080 Ti): 10 runs,
# 5 within (three A40 runs of an instrumented 0.25.0 fork -0.90..-1.25 GiB, unexplained; an LMCache run with partial
# inputs -0.31; A10G FlashInfer FULL graphs +0.46). Then FlashInfer's per-graph decode workspace (docs/vllm-budget.md
# 2.5, "FlashInfer's decode wrappers") brings the A10G run to +0.01: 157 of 188.
# 19th held-out set (HELDOUT19.md, predicted at 84db0af): 4 runs, 2 within (gpt-oss-120b TP 2 on H200 +2.68: weights
# -2.60, the Triton MXFP4 layout, since implemented: +0.16; a LoRA run whose own figures are impossible, -11.55, kept
# out of this file): 160 of 191.
# 20th held-out set (HELDOUT20.md, predicted at 5b6cae5): one run (gpt-oss-20b on A100, 0.10.1.1), +0.01: 161 of 192.
# 21st held-out set (HELDOUT21.md, predicted at 607da17): one run (gpt-oss-120b on H100, 0.11.2), +0.18: 162 of 193.
# 22nd held-out set (HELDOUT22.md, predicted at 589d504): five runs (L40S 0.11.0, L4 0.11.0, RTX 5090 0.17.1 x 3),
# 3 within (a forced AWQ kernel's dequantized weights, +0.62, and an FP8 R1 distill on L40S, +0.51, outside): 165 of 198.
# The dg05 A100 0.31.0 run of set 13 and the kagaho 2 x L40S run of set 15 removed: copies of the week10 and
# l40s-llama-3-70b logs stored before them (search-index ids that named no repository), counted twice: 163 of 196.
# The forced-AWQ dequantized weight (docs/vllm-budget.md 2.3.8) brings set 22's forced RTX 5090 run inside: 164 of 196.
# 23rd held-out set (HELDOUT23.md, predicted at 84de87e): three RTX PRO 6000 runs of 0.27.1, one within (Qwen3-32B
# TP 2); Qwen3-235B-FP8 TP 4 +1.27 (consumed 1.38 over the weights) and Qwen3-32B PP 2's stage 0 +1.38: 165 of 199.
# 24th held-out set (HELDOUT24.md, predicted at a43c1a8): gpt-oss-120b on a Kaggle H100, 0.16.0, +0.19: 166 of 200.
# FP8 MoE experts on Marlin/Triton keep the Triton workspace (docs/vllm-budget.md 2.3.1; the A100-40GB Qwen3-Coder FP8
# run inside): 167 of 200. One ring's NCCL connections whatever the TP size on GPUs without a measured communicator
# (2.4.2; 8 x L40S TP 8 and 4 x RTX 3090 TP 4 inside): 169 of 200.
# 26th held-out set (HELDOUT26.md, predicted at 16331af): four runs sets 18-19 had set aside for their then
# uncatalogued GPUs (H100 64GB x 3, A800 TP 4), 4 within: 173 of 204.
# The RTX 4090's total under the R580 drivers that vLLM's CUDA 13 wheels (0.20.1+) need, 23.52 GiB (docs/vllm-budget.md
# 2.1): the 0.29.0 and 0.23.0 RTX 4090 runs inside: 175 of 204.
# 27th held-out set (HELDOUT27.md, predicted at a972102): 4 runs, 3 within (Llama-3.2-3B on L4, 0.27.1 cold compile with
# CUDA graphs, +0.82: one embedding table more in 'consumed' than the eager start, not explained): 178 of 208. From 0.25
# the Triton MXFP4 path frees the checkpoint's scales (docs/vllm-budget.md 2.2): set 27's 0.26.0 gpt-oss-20b weights
# +0.41 -> -0.15 (available -0.10 -> +0.46, inside 2 %).
# 28th held-out set (HELDOUT28.md, predicted at 27a41bb): 5 runs, 2 within; gpt-oss's 1024-token CUDA-graph sizes
# (docs/vllm-budget.md 2.5) bring its two L40 runs inside: 182 of 213.
# The T4's total under the R580 drivers, 14.56 GiB (a 0.28.0 Colab start, docs/vllm-budget.md 2.1): the 0.30.0 T4 run
# inside (+0.34 -> +0.18): 183 of 213.
# 32nd held-out set (HELDOUT32.md, predicted at cb8bec9): 2 runs, 1 within (the RTX 3090 start's short compile most likely
# hit Inductor's own FX graph cache, docs/vllm-budget.md 2.3.6; stored cold, as logged): 184 of 215.
# 34th held-out set (HELDOUT34.md, predicted at 1e83119): 1 run, a miss (+0.25 on an A10G: a newer driver's lower total
# and the TP-1 non-torch residue, neither derived): 184 of 216. The A10G's R580-era total (22587 MiB, a CUDA 13 torch
# line, docs/vllm-budget.md 2.1) brings it inside (+0.14): 185 of 216.
# 35th held-out set (HELDOUT35.md, predicted at 5b4585e): 1 run, within (gpt-oss-120b TP 2 on A40s, -0.07): 186 of 217.
# 38th held-out set (HELDOUT38.md, predicted at cefcca0): 1 run, a miss (Qwen3.6-27B-FP8 with MTP on 2 x RTX 3090,
# +1.48; no term logged): 186 of 218.
# 39th held-out set (HELDOUT39.md, predicted at 1703e7c): 1 run, a miss (Llama-3.1-8B + EAGLE-3 head on an A100-40GB,
# +1.18: the predictor left the drafter out; with it +0.39, set 38 +1.25): 186 of 219. The EAGLE-3 head's pass inside
# model runner V2's dummy run (docs/vllm-releases.md 12) brings set 39 inside (+0.02): 187 of 219.
# 40th held-out set (HELDOUT40.md, predicted at f33889e): 3 runs, none within with the inputs their logs show (the
# helper's utilization for two was wrong); the shared full-vocabulary LM head, the V1 fallback and V1's rejection-sampler
# dry run (docs/vllm-releases.md 12) bring all three inside: 190 of 222.
# 41st held-out set (HELDOUT41.md, predicted at 0f4c845): 4 runs, 4 within (Qwen2.5-1.5B on an RTX 4090 x 3, Qwen3-1.7B
# on an H100): 194 of 226.
# 44th held-out set (HELDOUT44.md, predicted at 3745bf8): 4 runs, 3 within (Qwen3-4B-Thinking-2507 notebook starts: three
# on Colab A100-40GBs, one on an A30 with bitsandbytes); the miss (+1.13) is FlashInfer's CUDA-graph estimate on
# 0.20, logged 1.48 GiB against kvcalc's 0.62: 197 of 230.
# 45th held-out set (HELDOUT45.md, predicted at 94f0fb4): 10 runs, 4 within (the same model from one course's notebooks
# and logs); two runs whose logs show memory no term explains keep their own bound ('anomaly' in CALIBRATION.json):
# 201 of 240.
# FlashInfer's workspace in the first FULL sample of model runner V1's CUDA-graph profiling, and no decode-wrapper
# workspace extrapolated to the other FULL graphs (core.budget_device): six runs 0.07-0.39 GiB closer (sets 16, 28,
# 38, 40, 44, 45), the A10G start on 0.22.0 with FlashInfer forced from -0.11 to +0.17: 201 of 240.
# 46th held-out set (HELDOUT46.md, predicted at 630b16d): 3 runs, 1 within; the two NemotronH starts kvcalc refused
# then (it reads NemotronH now; their LoRA on MoE is not modelled) stay out: 202 of 241.
# 47th held-out set (HELDOUT47.md, predicted at 73a77e1): 3 Unsloth GRPO starts, 1 within: 203 of 244.
# 48th held-out set (HELDOUT48.md): two runs found, both set aside from their inputs; nothing predicted: 203 of 244.
# Qwen3.5/3.6's vision encoder pass (docs/vllm-budget.md 2.3.5): set 38's Qwen3.6-27B-FP8 TP 2 start on RTX 3090s from
# +0.86 to -0.05: 204 of 244.
# Qwen2.5-VL's tower, its multimodal RoPE table and its encoder pass (docs/vllm-budget.md 2.3.5), checked on three
# public starts collected for it (3B on an L4, 0.11.0 +0.10 and 0.15.0 +0.03; the 7B 0.23.0 start that fails, refused):
# 206 of 246.
BOUND_HITS = 206
BOUND_MAX_GIB = 5.4
BOUND_WEIGHTS_GIB = 0.25  # MiniMax-M2.7 TP 4 (-0.22); gpt-oss-20b TP 2 was -0.58 before the Triton MXFP4 layout (-0.16)


if __name__ == "__main__":  # python tests/test_budget_calibration.py
    for run_id, r in calibration_table():
        print(run_id, r)
