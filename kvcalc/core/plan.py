"""The parallel plan: which layers each PP stage holds, which KV heads each TP rank
holds, and how global / local / DP / PP / TP ranks relate (vLLM's layout DP x PP x TP).
"""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.errors import PlanError, named


@record
class ParallelPlan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    pp_layers: tuple[int, ...] | None = None  # explicit split, like VLLM_PP_LAYER_PARTITION
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        for flag, value in ((named("tp"), self.tp), (named("pp"), self.pp), (named("dp"), self.dp)):
            if not isinstance(value, int) or value < 1:
                raise PlanError(f"{flag} must be a positive integer, got {value!r}")
        if self.gpus_per_node < 1:
            raise PlanError(f"{named('gpus_per_node')} must be a positive integer, got {self.gpus_per_node!r}")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def ranks_per_replica(self) -> int:
        return self.tp * self.pp


def pp_ranges(num_layers: int, pp: int, partition: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """[start, end) of every PP stage, as vLLM's ``get_pp_indices``.

    Each stage gets ``n // pp`` layers; the remainder goes one each to the stages
    from the second-to-last backwards, never the last: 80/3 -> 27, 27, 26; 4/3 -> 1, 2, 1.
    An explicit partition must have ``pp`` positive counts summing to ``n``.
    """
    if partition is not None:
        if len(partition) != pp:
            raise PlanError(f"{named('pp_layers')} has {len(partition)} entries but {named('pp')} is {pp}: give one count per stage")
        if any(p < 0 for p in partition):
            raise PlanError(f"{named('pp_layers')} entries must be non-negative, got {','.join(map(str, partition))}")
        if sum(partition) != num_layers:
            raise PlanError(
                f"{named('pp_layers')} sums to {sum(partition)} but the model has {num_layers} layers: the counts must add up"
            )
        sizes = list(partition)
    else:
        if pp > num_layers:
            raise PlanError(f"{named('pp')} {pp} is larger than the model's {num_layers} layers")
        base, rem = divmod(num_layers, pp)
        sizes = [base] * pp
        for i in range(rem):
            sizes[pp - 2 - i] += 1
    out, start = [], 0
    for s in sizes:
        out.append((start, start + s))
        start += s
    return out


def parse_partition(text: str) -> tuple[int, ...]:
    """Parse 'a,b,c' as VLLM_PP_LAYER_PARTITION does (no empty or non-integer entries)."""
    parts = text.split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise PlanError(f"{named('pp_layers')} must be comma-separated integers like 15,16,15,15, got {text!r}") from None
    return values


def kv_heads_per_rank(total_kv_heads: int, tp: int, *, what: str = "KV heads") -> tuple[int, bool]:
    """KV heads one TP rank holds, and whether they are replicas (vLLM ``get_num_kv_heads``
    plus the model code's assertions): ``N/tp`` when tp divides N; one replicated head
    when tp is a multiple of N; anything else is an error."""
    if total_kv_heads >= tp:
        if total_kv_heads % tp:
            raise PlanError(
                f"{named('tp')} {tp} does not divide the model's {total_kv_heads} {what}; "
                f"valid: a divisor of {total_kv_heads} or a multiple of it"
            )
        return total_kv_heads // tp, False
    if tp % total_kv_heads:
        raise PlanError(
            f"{named('tp')} {tp} is neither a divisor nor a multiple of the model's {total_kv_heads} {what}; "
            f"valid: a divisor of {total_kv_heads} or a multiple of it"
        )
    return 1, True


@record
class RankId:
    global_rank: int
    local_rank: int
    node: int
    dp_rank: int
    pp_rank: int
    tp_rank: int


def rank_ids(plan: ParallelPlan) -> list[RankId]:
    """Every rank of the deployment; global rank = (dp * pp + pp_rank) * tp + tp_rank."""
    out = []
    for dp_rank in range(plan.dp):
        for pp_rank in range(plan.pp):
            for tp_rank in range(plan.tp):
                g = (dp_rank * plan.pp + pp_rank) * plan.tp + tp_rank
                out.append(
                    RankId(
                        global_rank=g,
                        local_rank=g % plan.gpus_per_node,
                        node=g // plan.gpus_per_node,
                        dp_rank=dp_rank,
                        pp_rank=pp_rank,
                        tp_rank=tp_rank,
                    )
                )
    return out
