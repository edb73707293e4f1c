"""Run-time checks of every GRPO rollout: the tokens trained on are the tokens sampled, plus the tool's.

TRL 1.16's ``environment_factory`` path (``GRPOTrainer._tool_call_loop``) builds a multi-turn
completion by concatenation, never by decoding and re-encoding the conversation: the first turn's
sampled ids, then for each tool round the *tool suffix* and the next turn's sampled ids, cut so the
whole completion fits ``max_completion_length``. The tool suffix is the one place between turns
where text is tokenized again: ``GRPOTrainer._get_tool_suffix_ids`` renders the chat template around
the tool messages in a dummy conversation, tokenizes it, and keeps what follows the last EOS of the
prefix. A template whose turns do not end in the tokenizer's EOS, or a tokenizer that merges across
that boundary, would splice tokens the policy never produced into the completion; a tool mask
shorter or longer than the completion would mask the wrong tokens. Users of real tokenizers report
both (silently skewed losses, crashes in the loss).

`guard_rollouts` wraps the trainer's generation (pinned to trl 1.16, tested in
tests/train/test_real_tokenizer.py) and checks, for every rollout of every batch:

- ``len(tool_mask) == len(completion_ids)``;
- ``len(completion_ids) <= max_completion_length``: the budget is per rollout, tool tokens included;
- each run of model tokens (mask 1) is exactly what that turn's ``generate`` call sampled for this
  rollout (the last run may be cut short, only where the budget is used up);
- each run of tool tokens (mask 0) is exactly the tool suffix of that round's tool messages.

A violation is a `RolloutCheckError` naming the rollout, the turn and the differing tokens. It also
logs ``env/truncated``: the share of rollouts that ended on a budget instead of an answer — the
last turn cut at ``max_completion_tokens`` (it does not end in EOS), or a tool call left unanswered
(its results rolled back because they would overflow the budget, or ``max_searches`` rounds used
up). TRL's ``completions/clipped_ratio`` misses the second kind: such a rollout ends in EOS.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


class RolloutCheckError(RuntimeError):
    """A rollout whose trained tokens are not the sampled and tool tokens; the message names the rollout."""


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal values as ``(value, start, end)``.

    >>> mask_runs([1, 1, 0, 0, 0, 1])
    [(1, 0, 2), (0, 2, 5), (1, 5, 6)]
    """
    runs: list[tuple[int, int, int]] = []
    for i, value in enumerate(mask):
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1], i + 1)
        else:
            runs.append((value, i, i + 1))
    return runs


def split_completion(ids: Sequence[int], mask: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
    """Model turns and tool suffixes of a completion: ``len(turns) == len(tools) + 1`` (the last turn may be empty).

    >>> split_completion([5, 6, 9, 9, 7], [1, 1, 0, 0, 1])
    ([[5, 6], [7]], [[9, 9]])
    """
    turns: list[list[int]] = [[]]
    tools: list[list[int]] = []
    for value, start, end in mask_runs(mask):
        if value:
            turns[-1] = list(ids[start:end])
        else:
            tools.append(list(ids[start:end]))
            turns.append([])
    return turns, tools


def tool_rounds(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The tool messages of a completion, grouped by round (consecutive ``tool`` messages)."""
    rounds: list[list[dict[str, Any]]] = []
    previous = None
    for message in messages:
        if message.get("role") == "tool":
            if previous != "tool":
                rounds.append([])
            rounds[-1].append(message)
        previous = message.get("role")
    return rounds


def check_batch(completion_ids: Sequence[Sequence[int]], tool_mask: Sequence[Sequence[int]],
                completions: Sequence[Sequence[dict[str, Any]]], sampled: Sequence[Sequence[Sequence[int]]], *,
                budget: int, tool_suffix: Callable[[list[dict[str, Any]]], list[int]], stop_ids: Sequence[int],
                decode: Callable[[Sequence[int]], str] = str) -> list[bool]:
    """Check one generation batch (see the module docstring); returns, per rollout, whether it was truncated.

    ``sampled[j]`` holds what the j-th generate call returned: call 0 one row per rollout, call j >= 1
    one row per rollout still in the tool loop after j rounds, in rollout order (TRL's ``idxs_with_tool``;
    `align_turns`)."""
    n = len(completion_ids)
    split = []
    for i in range(n):
        ids, mask = completion_ids[i], tool_mask[i]
        if len(mask) != len(ids):
            raise RolloutCheckError(f"rollout {i}: tool_mask has {len(mask)} entries for {len(ids)} completion tokens; "
                                    f"the loss would mask the wrong tokens")
        if len(ids) > budget:
            raise RolloutCheckError(f"rollout {i}: {len(ids)} completion tokens, over the per-rollout budget "
                                    f"max_completion_tokens={budget} (tool tokens included)")
        split.append(split_completion(ids, mask))
    rows = align_turns(sampled, [len(tools) for _, tools in split])
    truncated = []
    for i, (turns, tools) in enumerate(split):
        rounds = tool_rounds(completions[i])
        if len(rounds) != len(tools):
            raise RolloutCheckError(f"rollout {i}: {len(tools)} runs of masked tokens but {len(rounds)} rounds of tool "
                                    f"messages; tool results are not where the mask says")
        for j, (got, group) in enumerate(zip(tools, rounds), start=1):
            want = tool_suffix(group)
            if got != want:
                raise RolloutCheckError(f"rollout {i}, tool round {j}: the masked tokens {decode(got)[:80]!r} are not "
                                        f"the chat template's rendering of the tool results {decode(want)[:80]!r}")
        full = len(completion_ids[i]) == budget
        for j, got in enumerate(turns if rows is not None else ()):
            want = rows[j][i]
            if got != want and not (full and j == len(turns) - 1 and got == want[: len(got)]):
                at = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                raise RolloutCheckError(f"rollout {i}, turn {j}: the trained tokens differ from the sampled ones at "
                                        f"token {at} ({decode(got[at:at + 8])!r} vs sampled {decode(want[at:at + 8])!r}); "
                                        f"the policy would be trained on tokens it did not produce")
        last = completions[i][-1] if completions[i] else {}
        ids = completion_ids[i]
        truncated.append(bool(not ids or ids[-1] not in stop_ids or last.get("tool_calls")))
    return truncated


def align_turns(sampled: Sequence[Sequence[Sequence[int]]], rounds: Sequence[int]) -> list[list[list[int]]] | None:
    """``rows[j][i]``: what generate call j sampled for rollout i, from the calls in order (call 0: every
    rollout; call j: the rollouts with at least j tool rounds, in order). None, with a warning, when the calls
    do not line up so (a generation backend that returns rows otherwise): the sampled-id check is then skipped,
    the mask, budget and tool-suffix checks still run."""
    n = len(rounds)
    counts = [n] + [sum(r >= j for r in rounds) for j in range(1, 1 + max(rounds, default=0))]
    got = [len(call) for call in sampled]
    if got[: len(counts)] != counts or any(got[len(counts):]):
        log.warning("rollout checks: the generate calls returned %s rows where the tool loop implies %s; the "
                    "check that trained ids are the sampled ids is skipped for this batch", got, counts)
        return None
    rows: list[list[list[int]]] = [[list(r) for r in sampled[0]]]
    for j in range(1, len(counts)):
        members = [i for i in range(n) if rounds[i] >= j]
        by_rollout = dict(zip(members, sampled[j]))
        rows.append([list(by_rollout.get(i, [])) for i in range(n)])
    return rows


def guard_rollouts(trainer: Any) -> None:
    """Check every rollout ``trainer`` (a TRL 1.16 ``GRPOTrainer`` with tools) generates and log ``env/truncated``.

    Wraps the bound ``_generate_single_turn`` (to record what each generate call sampled) and
    ``_generate`` (to check the assembled completions) on this instance only."""
    import torch

    sampled: list[list[list[int]]] = []
    generate_turn, generate = trainer._generate_single_turn, trainer._generate

    def recording_turn(*args: Any, **kwargs: Any) -> Any:
        ids, logprobs = generate_turn(*args, **kwargs)
        sampled.append([list(row) for row in ids])
        return ids, logprobs

    def checked_generate(prompts: list) -> Any:
        sampled.clear()
        out = generate(prompts)
        _, completion_ids, tool_mask, completions = out[:4]
        if trainer.rollout_func is None and tool_mask is not None:
            tok = trainer.processing_class
            truncated = check_batch(
                completion_ids, tool_mask, completions, sampled, budget=trainer.max_completion_length,
                tool_suffix=trainer._get_tool_suffix_ids, stop_ids=[*trainer.eos_token_ids, tok.pad_token_id],
                decode=lambda ids: tok.decode(list(ids)))
            flags = trainer.accelerator.gather(torch.tensor(truncated, dtype=torch.float32,
                                                            device=trainer.accelerator.device))
            mode = "train" if trainer.model.training else "eval"
            trainer._metrics[mode]["env/truncated"].append(flags.mean().item())
        return out

    trainer._generate_single_turn = recording_turn
    trainer._generate = checked_generate


__all__ = ["RolloutCheckError", "align_turns", "check_batch", "guard_rollouts", "mask_runs", "split_completion", "tool_rounds"]
