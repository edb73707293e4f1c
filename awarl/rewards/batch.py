"""Global-batch statistics for reward functions: one gather across processes, then plain numbers.

TRL calls a reward function on every process with that process's slice of the generation batch,
and a prompt's rollouts may be split across processes (TRL_NOTES). So refusal rates, batch
precision / accuracy / RA-F1 and group statistics are computed only from the gathered rows of
the whole batch; every process then holds the same numbers. Single-process runs skip the gather.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from awarl.protocol import Score
from awarl.eval.metrics import Metrics, compute_metrics

OUTCOME_CODES = {"correct": 0, "wrong": 1, "unparsable": 2, "abstain": 3}


@dataclass(frozen=True)
class RolloutRow:
    """What one rollout contributes to the global batch statistics (small and picklable)."""

    group: int          # stable key of the prompt; rollouts of one prompt share it
    outcome: int        # OUTCOME_CODES
    p: float            # capability of the query; NaN when unknown
    searches: int       # search calls; -1 when unknown
    cite: float = float("nan")  # weighted citation term paid to this rollout; NaN when none is paid
    answerable: bool = True
    answer_reward: float = float("nan")  # what an answer earns (kind's rule + attempt bonus); NaN for abstentions
    forced: bool = False  # generated with the refusal banned in an all-abstain group (awarl.train.forced)

    @property
    def sampled(self) -> int:
        """The outcome the policy itself sampled: a forced rollout stands for the abstention it replaced."""
        return OUTCOME_CODES["abstain"] if self.forced else self.outcome


def batch_metrics(outcomes: Sequence[str]) -> Metrics:
    """The metrics of docs/metrics.md over one batch of outcomes, through the evaluation's own `compute_metrics`, so
    training logs and evaluation reports can never disagree (an unparsable reply counts as a wrong answer).

    >>> m = batch_metrics(["correct", "wrong", "abstain", "abstain"])
    >>> (m.precision, m.accuracy, round(m.ra_f1, 4), m.refusal_rate)
    (0.5, 0.25, 0.3333, 0.5)
    """
    return compute_metrics([Score(outcome, 0.0, 0.0) for outcome in outcomes])


def group_key(row_id: Any, prompt: Any) -> int:
    """A key equal on every process for rollouts of the same prompt: the dataset ``id`` when
    there is one, else the prompt itself (Python's ``hash`` differs between processes)."""
    basis = row_id if row_id is not None else prompt
    text = basis if isinstance(basis, str) else json.dumps(basis, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def all_abstain_share(rows: Sequence[RolloutRow]) -> float | None:
    """Share of prompt groups (with ≥ 2 rollouts) in which every rollout abstained: GRPO gives
    them zero advantage whatever the penalty says. None when no group has 2 rollouts."""
    shares = group_shares(rows, [0.0] * len(rows))
    return None if shares is None else shares.all_abstain


@dataclass(frozen=True)
class GroupShares:
    """How the prompt groups (≥ 2 rollouts, keyed by `group_key`) of one generation batch look to GRPO."""

    groups: int
    all_abstain: float     # every rollout abstained: zero advantage whatever P_t says (collapse is absorbing)
    zero_advantage: float  # every rollout earned the same total reward: no gradient from this group
    three_outcome: float   # correct, wrong (or unparsable) and abstain all present: where arms differ


_ZERO_STD = 1e-9  # rewards closer than this count as equal (GRPO divides by std + 1e-4)


def group_shares(rows: Sequence[RolloutRow], totals: Sequence[float]) -> GroupShares | None:
    """`GroupShares` of the gathered rows, ``totals[i]`` being the total reward of ``rows[i]`` (the sum
    GRPO normalises within the group). None when no group has 2 rollouts.

    >>> rows = [RolloutRow(1, 3, 0.0, 1), RolloutRow(1, 3, 0.0, 1), RolloutRow(2, 0, 0.5, 1),
    ...         RolloutRow(2, 1, 0.5, 1), RolloutRow(2, 3, 0.5, 1)]
    >>> group_shares(rows, [0.3, 0.3, 1.0, 0.0, 0.4])
    GroupShares(groups=2, all_abstain=0.5, zero_advantage=0.5, three_outcome=0.5)
    """
    by_group: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_group[row.group].append(i)
    groups = [members for members in by_group.values() if len(members) >= 2]
    if not groups:
        return None
    abstain, correct = OUTCOME_CODES["abstain"], OUTCOME_CODES["correct"]
    all_abstain = zero = three = 0
    for members in groups:
        outcomes = {rows[i].outcome for i in members}
        values = [totals[i] for i in members]
        all_abstain += outcomes == {abstain}
        zero += max(values) - min(values) <= _ZERO_STD
        three += abstain in outcomes and correct in outcomes and bool(outcomes - {abstain, correct})
    n = len(groups)
    return GroupShares(n, all_abstain / n, zero / n, three / n)


def distributed_world() -> tuple[int, int]:
    """(rank, world size) of the torch.distributed group, (0, 1) when there is none.

    torch is looked up in ``sys.modules`` rather than imported: when nothing imported it, no
    process group can exist, and the reward stays torch-free."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0, 1
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def gather_rows(rows: list[RolloutRow]) -> list[RolloutRow]:
    """All processes' rows, in rank order (each process calls this in lock-step). The one place
    in the rewards that touches torch/accelerate, and only when a process group exists."""
    _, world = distributed_world()
    if world == 1:
        return list(rows)
    from accelerate import PartialState
    from accelerate.utils import gather_object

    if PartialState().num_processes == world:
        return list(gather_object(list(rows)))
    # A process group accelerate did not set up: gather with torch.distributed directly.
    import torch.distributed as dist

    parts: list[list[RolloutRow] | None] = [None] * world
    dist.all_gather_object(parts, list(rows))
    return [row for part in parts for row in part]
