"""awarl's rewards for TRL's own CLI: ``trl grpo --reward_funcs awarl.rewards.awa_reward``.

TRL 1.16's ``trl/scripts/grpo.py`` resolves every ``--reward_funcs`` entry that holds a dot by
``importlib.import_module`` of the part before the last dot and ``getattr`` of the rest, then hands
the object to ``GRPOTrainer`` as is. So a reward it takes by path is a module attribute called as
``f(prompts, completions, completion_ids, **columns)``; `awa_reward` and `citation_reward` are
such functions (`awarl.rewards` resolves both names to these).

Their settings come from an awarl recipe: the file (or a checkpoint / run folder holding
``awarl_recipe.yaml``) that ``$AWARL_RECIPE`` names; only its ``reward:`` and ``rollout:`` sections
are read (what is correct, which phrases abstain, the AWA and citation knobs). Without
``$AWARL_RECIPE`` the documented defaults of `RewardConfig` and `RolloutSettings` apply. TRL's
own config file can set it: ``env: {AWARL_RECIPE: recipe.yaml}``. Both functions of one process
share one `AnswerAbstainReward` (the penalty P_t) and one `CitationReward`, built on first call,
so the expected refusal rate counts what citations pay, as in ``awarl train grpo``.

What TRL's CLI cannot pass, and what that means here (docs/integrations.md):

- no ``environment_factory``: the policy gets no search tool; a rollout is one completion, so
  every abstention counts as made before a search (``reward.abstain_requires_search`` would turn
  all of them into wrong answers, so it is refused) and ``env/searches_per_rollout`` is not logged;
- no callbacks: the penalty state (Ē, P, step) is not saved with TRL's checkpoints, and a resumed
  run starts again from P = 0. ``awarl train grpo`` saves and restores it;
- no reward weights from the recipe: `citation_reward` returns ``w_cite`` × (coverage − w_red ×
  redundancy) itself, so leave TRL's ``reward_weights`` unset (1.0 each).

The dataset needs awarl's columns: ``prompt``, ``answers``, ``answerable``, ``p`` (capability)
and ``id``, plus ``supporting`` for the gold citation judge. ``awarl export-dataset`` writes them
from a p_i table (`awarl.integrations.hub`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.agent.settings import RECIPE_FILE, RolloutSettings, check_recipe_layout
from awarl.config_fields import ConfigError, read_yaml_file
from awarl.rewards import build_reward_funcs
from awarl.rewards.awa import AnswerAbstainReward
from awarl.rewards.citation import CitationReward
from awarl.rewards.config import RewardConfig

log = logging.getLogger(__name__)

RECIPE_ENV = "AWARL_RECIPE"
"""Environment variable naming the recipe (or a folder holding ``awarl_recipe.yaml``)."""

__all__ = ["RECIPE_ENV", "RecipeRewards", "awa_reward", "citation_reward", "load_recipe_settings", "recipe_rewards"]


@dataclass(frozen=True)
class RecipeRewards:
    """The reward functions one recipe builds: the answer/abstain reward and, when the recipe
    pays citations, the citation reward."""

    source: str | None
    awa: AnswerAbstainReward
    citation: CitationReward | None


def load_recipe_settings(path: str | Path | None) -> tuple[RewardConfig, RolloutSettings]:
    """The ``reward:`` and ``rollout:`` sections of a recipe (a YAML file, or a folder holding
    ``awarl_recipe.yaml``); the defaults when ``path`` is None. Bad values are a `ConfigError`
    naming the file and the field."""
    if path is None:
        return RewardConfig(), RolloutSettings()
    path = Path(path)
    if path.is_dir():
        path = path / RECIPE_FILE
    raw = read_yaml_file(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the recipe must be a YAML mapping, got {type(raw).__name__}")
    check_recipe_layout(raw, str(path))
    reward = RewardConfig.from_dict(raw.get("reward") or {}, f"{path}: reward")
    rollout = RolloutSettings.from_dict(raw.get("rollout") or {}, f"{path}: rollout")
    return reward, rollout


def recipe_rewards(path: str | Path | None = None) -> RecipeRewards:
    """The rewards of the recipe ``path`` (default: ``$AWARL_RECIPE``), built once per process and
    recipe; both TRL-facing functions call through it, so they share the penalty state.

    Keep the returned ``.awa`` to save the penalty yourself (``.awa.state_dict()``) in a script of
    your own around TRL's trainer."""
    if path is None:
        path = os.environ.get(RECIPE_ENV) or None
    return _build(str(Path(path).resolve()) if path is not None else None)


@functools.lru_cache(maxsize=None)
def _build(source: str | None) -> RecipeRewards:
    if source is None:
        log.warning("$%s is not set: awa_reward / citation_reward use awarl's default reward and rollout "
                    "settings (docs/rewards.md); set it to your recipe", RECIPE_ENV)
    cfg, rollout = load_recipe_settings(source)
    where = source or "the default reward settings"
    if cfg.kind != "awa":
        raise ConfigError(f"{where}: reward.kind is {cfg.kind!r}; awarl.rewards.awa_reward is the AWA reward "
                          f"(kind awa). Baselines run through `awarl train grpo`")
    if cfg.abstain_requires_search:
        raise ConfigError(f"{where}: reward.abstain_requires_search needs the search tool, which TRL's CLI cannot "
                          f"give the policy (no environment_factory); set it to false for `trl grpo`")
    funcs, _ = build_reward_funcs(cfg, rollout)
    awa = next(f for f in funcs if isinstance(f, AnswerAbstainReward))
    citation = next((f for f in funcs if isinstance(f, CitationReward)), None)
    return RecipeRewards(source, awa, citation)


def awa_reward(prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
               **kwargs: Any) -> list[float]:
    """AWA-RL answer/abstain reward of the recipe in ``$AWARL_RECIPE``: an answer earns the outcome
    reward, an abstention R_base(p) − P_t (capped), with P_t moved once per generation batch from
    the batch's observed and expected refusal rates (over all processes). Reads the dataset columns
    ``answers``, ``answerable``, ``p`` and ``id``; logs ``awa/…`` metrics through TRL."""
    return recipe_rewards().awa(prompts, completions, completion_ids, **kwargs)


def citation_reward(prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                    **kwargs: Any) -> list[float | None]:
    """Citation reward of the recipe in ``$AWARL_RECIPE``, already weighted: ``w_cite`` × (coverage −
    w_red × redundancy) on the answers the recipe's ``cite_on`` rewards, None (no term) elsewhere.
    The gold judge reads the ``supporting`` column."""
    rewards = recipe_rewards()
    if rewards.citation is None:
        raise ConfigError(f"{rewards.source or 'the default reward settings'}: the recipe pays no citations "
                          f"(reward.w_cite is 0 or reward.judge is off); drop awarl.rewards.citation_reward "
                          f"from --reward_funcs")
    weight = rewards.citation.cfg.w_cite
    return [None if v is None else weight * v for v in rewards.citation(prompts, completions, completion_ids,
                                                                        **kwargs)]
