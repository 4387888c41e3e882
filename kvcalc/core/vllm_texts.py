"""vLLM's start-up refusal texts, word for word, as each release line prints them.

Read in the wheels (docs/vllm-releases.md section 5): the fit check's message
(vllm==0.8.2: vllm/v1/core/kv_cache_utils.py:478-484; vllm==0.8.4: :536-552; vllm==0.9.1:
:562-579; vllm==0.13.0: :698-719; vllm==0.14.0: :625-641; vllm==0.22.0: :709-730;
vllm==0.33.0: vllm/v1/core/kv_cache_planning.py:56-90) and the no-memory message. The
wording is vLLM's; the fields of ``RuleLine`` pick the variant. Pure: no I/O.
"""

from __future__ import annotations

from kvcalc.core.vllm_rules import RuleLine

GIB = 1 << 30
DOCS = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
_SEE = f"See {DOCS} for more details."


def _gib(rules: RuleLine, n: int) -> str:
    """format_gib (round, "24.0") from 0.14.0; f"{x:.2f}" before (vllm==0.14.0: utils/mem_utils.py:21)."""
    return f"{round(n / GIB, 2)}" if rules.gib_round else f"{n / GIB:.2f}"


def no_memory_error(rules: RuleLine) -> str:
    """available <= 0 (vllm==0.8.0: kv_cache_utils.py:468; 0.13.0: :687-693; 0.22.0: :697-705)."""
    if rules.cpu_clause:
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the "
            "engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). " + _SEE
        )
    text = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    return f"{text} {_SEE}" if rules.docs_url else text


def fit_error(rules: RuleLine, check: int, needed: int, L: int, estimate: int) -> str:
    """The "To serve at least one request ..." refusal of the release line."""
    if check <= 0:
        return no_memory_error(rules)
    unit = rules.fit_gib_unit
    head = (
        f"To serve at least one request with the {rules.fit_whose} max seq len ({L}), ({_gib(rules, needed)} {unit} KV "
        f"cache is needed, which is larger than the available KV cache memory ({_gib(rules, check)} {unit})."
    )
    if rules.fit_estimate == "none":  # 0.8.0-0.8.3
        return f"{head} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    if rules.fit_estimate == "blank":  # 0.8.4-0.9.0.1: the f-string with the number is a stray statement
        est = " Based on the available memory," if estimate > 0 else ""
        return f"{head}{est}  Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    knob = (
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine."
        if rules.cpu_clause
        else "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    tail = f" {_SEE}" if rules.docs_url else ""
    if rules.gib_round:  # 0.14.0-: "GiB). {estimated_msg}Try", the message ending in ". "
        est = f"Based on the available memory, the estimated maximum model length is {estimate}. " if estimate > 0 else ""
        return f"{head} {est}{knob}{tail}"
    # 0.9.1-0.13.0: "GiB). {estimated_msg} Try" (two spaces when there is no estimate)
    est = f"Based on the available memory, the estimated maximum model length is {estimate}." if estimate > 0 else ""
    return f"{head} {est} {knob}{tail}"
