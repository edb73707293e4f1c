"""Forced-answer rollouts in all-abstain groups (``reward.forced_answer``; docs/rewards.md, "Generation
encouragement").

GRPO learns nothing from a prompt group whose rollouts all abstained: equal rewards, zero advantage.
A policy that abstains everywhere therefore stays there: lazy-refusal collapse is an absorbing state.
With ``reward.forced_answer`` on, `force_answers` wraps the trainer's generation. After TRL has generated
a training batch, the first rollout of every group whose rollouts all abstained is generated again with
the refusal phrases banned from decoding. The ban uses the adaptive p_i probe's token sequences
(`awarl.train.probe.refusal_token_sequences`), passed as the generation config's ``bad_words_ids``. The
new rollout has the same environment, tools and budgets. It replaces the abstention it was drawn for and
is trained on like any other rollout:

- a correct forced answer earns more than the group's abstentions, so answering that query becomes likelier;
- a wrong one earns less, so it becomes less likely;
- either way the answer's content gets a gradient.

- The forced rollout's environment has ``forced_answer = True``. The reward counts the rollout as the
  abstention it replaced in the batch refusal rate (hence in E_t and P_t) and in the all-abstain group
  share, so the controller and the collapse diagnostics read what the policy itself sampled. What the
  rollout earns is its answer's reward. ``awa/forced_answers`` logs the share of groups that got one,
  ``awa/forced_correct`` the share of forced answers that were right.
- Groups are found over the whole generation batch: every process's abstention flags are gathered.
  Every process then generates the same number of forced rollouts, padding with throwaway copies of its
  own first prompt, because TRL's generation gathers across processes.
- Training batches only (evaluation is never forced), transformers generation only: vLLM's sampler is
  not given the banned sequences, so a recipe with ``grpo.use_vllm`` is refused at start.
- A forced rollout is a sample of the constrained policy, scored with the unconstrained policy's
  log-probabilities (TRL's transformers path keeps no sampling log-probabilities), like a demonstration.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from awarl.protocol import parse_final
from awarl.rewards.batch import distributed_world, gather_rows, group_key

FORCED_ATTRIBUTE = "forced_answer"
"""The environment attribute that marks a forced rollout (read by `awarl.rewards.awa`)."""


def forced_rollouts(flags: Sequence[tuple[int, int, int, bool]]) -> list[tuple[int, int]]:
    """``(rank, index)`` of the rollout to force in each all-abstain group.

    ``flags`` holds, for every rollout of the gathered batch, ``(rank, index on that rank, group key,
    abstained)``. A group of two or more rollouts that all abstained gets one forced rollout: its first
    in (rank, index) order.

    >>> forced_rollouts([(0, 0, 7, True), (0, 1, 7, True), (1, 0, 7, True), (1, 1, 8, True), (1, 2, 8, False)])
    [(0, 0)]
    >>> forced_rollouts([(0, 0, 7, True), (1, 0, 7, True), (1, 1, 9, True)])
    [(0, 0)]
    """
    members: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for rank, index, group, abstained in flags:
        members[group].append((rank, index, abstained))
    out = [min((r, i) for r, i, _ in rows) for rows in members.values()
           if len(rows) >= 2 and all(a for _, _, a in rows)]
    return sorted(out)


def force_answers(trainer: Any, phrases: Sequence[str]) -> None:
    """Give every all-abstain group of each training batch one forced-answer rollout (module docstring).

    Wraps the bound ``_generate_and_score_completions`` (to see the batch's dataset rows) and ``_generate``
    of ``trainer`` (a TRL 1.16 ``GRPOTrainer`` with an ``environment_factory``), on this instance only;
    install it after `awarl.train.rollout_checks.guard_rollouts`, so forced rollouts are checked too."""
    from awarl.train.probe import refusal_token_sequences

    banned = refusal_token_sequences(trainer.processing_class, phrases)
    generate_and_score, generate = trainer._generate_and_score_completions, trainer._generate
    batch: dict[str, Any] = {}
    spares: dict[Any, list[Any]] = defaultdict(list)

    def with_rows(inputs: list) -> Any:
        batch["inputs"] = inputs
        try:
            return generate_and_score(inputs)
        finally:
            batch.clear()

    def forcing_generate(prompts: list) -> Any:
        out = generate(prompts)
        inputs = batch.get("inputs")
        if inputs is None or not trainer.model.training or not trainer.environments:
            return out
        rank, _ = distributed_world()
        completions = out[3]
        local = [(rank, i, group_key(row.get("id"), prompt), parse_final(completion, phrases).abstained)
                 for i, (row, prompt, completion) in enumerate(zip(inputs, prompts, completions, strict=True))]
        chosen = forced_rollouts(gather_rows(local))
        mine = [i for r, i in chosen if r == rank]
        width = max(Counter(r for r, _ in chosen).values(), default=0)  # the busiest process's count
        if width == 0:
            return out
        return _splice(out, mine, _generate_forced(trainer, generate, prompts, inputs, mine, width, banned, spares))

    trainer._generate_and_score_completions = with_rows
    trainer._generate = forcing_generate


def _generate_forced(trainer: Any, generate: Any, prompts: list, inputs: list, mine: list[int], width: int,
                     banned: list[list[int]], spares: dict[Any, list[Any]]) -> Any:
    """Generate ``width`` rollouts with the refusal banned: the rollouts at ``mine`` (their environments reset
    and marked forced), then throwaway copies of prompt 0 on spare environments up to ``width``."""
    names = trainer._batch_environments
    environments, tools = [], []
    for i in mine:
        env = trainer.environments[i]
        env.reset(**_reset_row(trainer, inputs[i]))
        setattr(env, FORCED_ATTRIBUTE, True)
        environments.append(env)
        tools.append((trainer._sync_tool_dicts[i], trainer._async_tool_dicts[i]))
    pads = width - len(mine)
    pool = spares[names[0]]
    while len(pool) < pads:
        pool.append(trainer.environment_factories[names[0]]())
    for env in pool[:pads]:
        env.reset(**_reset_row(trainer, inputs[0]))
        environments.append(env)
        tools.append(_tool_dicts(trainer, env))
    rows = mine + [0] * pads
    saved = (trainer.environments, names, trainer._sync_tool_dicts, trainer._async_tool_dicts)
    config, before = trainer.generation_config, trainer.generation_config.bad_words_ids
    metrics = trainer._metrics["train"]
    lengths = {key: len(values) for key, values in metrics.items()}
    trainer.environments = environments
    trainer._batch_environments = [names[i] for i in rows]
    trainer._sync_tool_dicts = [sync for sync, _ in tools]
    trainer._async_tool_dicts = [asynchronous for _, asynchronous in tools]
    config.bad_words_ids = banned
    try:
        return generate([prompts[i] for i in rows])
    finally:
        config.bad_words_ids = before
        trainer.environments, trainer._batch_environments, trainer._sync_tool_dicts, trainer._async_tool_dicts = saved
        # the batch's own generation metrics (lengths, tool calls, truncation) stay those of the sampled batch
        for key in list(metrics):
            if key not in lengths:
                del metrics[key]
            else:
                del metrics[key][lengths[key]:]


def _splice(out: tuple, mine: list[int], forced: tuple) -> tuple:
    """``out`` (what ``_generate`` returned for the batch) with the rollouts at ``mine`` replaced by the first
    ``len(mine)`` rollouts of ``forced``."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images = out
    if extra_fields or images is not None:
        raise RuntimeError("reward.forced_answer: the batch carries extra rollout fields or images, which forced "
                           "rollouts cannot replace")
    for k, i in enumerate(mine):
        prompt_ids[i], completion_ids[i], completions[i] = forced[0][k], forced[1][k], forced[3][k]
        if tool_mask is not None:
            tool_mask[i] = forced[2][k]
        if logprobs is not None:
            logprobs[i] = forced[4][k]
        if tool_images:
            tool_images[i] = forced[7][k]
    return out


def _reset_row(trainer: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments TRL passes to ``reset`` for ``row``."""
    return {k: v for k, v in row.items() if k != "environment"} if trainer._multi_environment else row


def _tool_dicts(trainer: Any, env: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """TRL's per-rollout tool dictionaries (sync, async) for ``env``: its public methods and the standalone tools."""
    import inspect

    methods = [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
               if name not in ("reset", "get_reward") and not name.startswith("_")]
    sync, asynchronous = {}, {}
    for tool in [*trainer._standalone_tools, *methods]:
        (asynchronous if inspect.iscoroutinefunction(tool) else sync)[tool.__name__] = tool
    return sync, asynchronous
