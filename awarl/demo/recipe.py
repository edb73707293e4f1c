"""The demo recipe (`configs/demo_world.yaml`): loading, ``--quick`` and ``--set`` overrides, and the
settings a demo folder was started with (``recipe.json``), checked on every resume."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.errors import ConfigError
from awarl.resources import config_path

DEFAULT_RECIPE = config_path("demo_world.yaml")
DEMO_KEYS = ("world", "warm_start", "shape", "capability", "arms", "quick", "floors")
"""The recipe's own sections; every other section is a training recipe (`awarl.train.config.TrainConfig`)."""


class DemoError(ConfigError):
    """A demo that cannot run (bad recipe, a folder holding another demo); the message says what to do."""


@dataclass
class DemoRecipe:
    """The demo recipe: the world, the model shape, p_i's K, and a training recipe (TrainConfig)."""

    world: dict[str, Any]
    abstain_share: float  # warm_start.abstain_share: unanswerable SFT questions whose gold conversation abstains
    shape: dict[str, Any]
    k: int
    train: dict[str, Any]  # TrainConfig sections without paths (the demo fills them)
    floors: dict[str, float]
    source: str
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """GRPO arms, each trained from the same SFT checkpoint and p_i: name -> the training sections it
    changes (at least ``reward: {kind: …}``). The first arm is the chatbot's agent."""
    renamed_copies: int = 0
    """warm_start.renamed_copies: renamed copies of each SFT conversation (`awarl.train.tiny.world_trajectories`)."""
    originals: bool = True
    """warm_start.originals: whether the real SFT conversations are trained on beside their renamed copies."""
    rename_ids: bool = False
    """warm_start.rename_ids: whether the renamed copies rename the passage ids too."""
    device: str = "cpu"
    """capability.device: where p_i and the evaluation roll out (``cpu``, ``cuda``, ``cuda:N``, ``auto``);
    SFT and GRPO follow their own ``use_cpu`` / ``bf16`` arguments."""
    clarified_share: float = 0.0
    """warm_start.clarified_share: the share of answerable SFT questions with namesakes that also get the
    conversation the chatbot has with the agent once the user has said which one is meant
    (`awarl.train.tiny.world_trajectories`)."""
    misread_share: float = 0.0
    """warm_start.misread_share: the share of the SFT conversations answering an answerable question whose
    answer is another country, citations kept (a noisy teacher: `awarl.train.tiny.misread`)."""

    @classmethod
    def load(cls, path: str | Path, *, quick: bool = False, seed: int = 0,
             overrides: Sequence[str] = ()) -> "DemoRecipe":
        """Read a demo recipe; ``quick`` applies its ``quick:`` overrides, then ``overrides``
        (``section.field=value``, as ``awarl demo --set``) apply on top."""
        from awarl.train.config import apply_override, load_yaml

        path = Path(path)
        if not path.is_file():
            raise DemoError(f"{path}: demo recipe not found")
        raw = load_yaml(path.read_text(encoding="utf-8")) or {}
        if not isinstance(raw, dict):
            raise DemoError(f"{path}: the demo recipe must be a YAML mapping")
        if quick:
            quick_keys = raw.get("quick") or {}
            if not isinstance(quick_keys, dict):
                raise DemoError(f"{path}: 'quick' must map dotted keys to values (e.g. sft.args.max_steps: 400)")
            for key, value in quick_keys.items():
                apply_override(raw, f"{key}={json.dumps(value)}")
        for item in overrides:
            apply_override(raw, item)
        world = dict(raw.get("world") or {})
        world["seed"] = seed
        capability = raw.get("capability") or {}
        train = {k: copy.deepcopy(v) for k, v in raw.items() if k not in DEMO_KEYS}
        train["seed"] = seed
        floors = _floors(raw.get("floors") or {}, "quick" if quick else "full", path)
        return cls(world, _abstain_share(raw.get("warm_start") or {}, path), dict(raw.get("shape") or {}),
                   int(capability.get("k", 8)), train, floors, str(path), _arms(raw, path),
                   *_warm_copies(raw.get("warm_start") or {}, path), _rename_ids(raw.get("warm_start") or {}, path),
                   _device(capability, path), _clarified_share(raw.get("warm_start") or {}, path),
                   _share(raw.get("warm_start") or {}, "misread_share", path))

    @property
    def temperature(self) -> float:
        """GRPO's sampling temperature (``grpo.temperature``, 1.0 by default), at which p_i is sampled too."""
        from awarl.train.config import grpo_temperature

        return grpo_temperature(self.train.get("grpo") or {})

    def arm_train(self, name: str) -> dict[str, Any]:
        """The training sections of arm ``name``: the shared ones with the arm's on top."""
        return merge(self.train, self.arms[name])


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, mapping by mapping (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _arms(raw: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The recipe's ``arms:``; without one, a single arm of the recipe's own reward."""
    arms = raw.get("arms")
    if arms is None:
        kind = (raw.get("reward") or {}).get("kind", "awa")
        return {str(kind): {"reward": {"kind": kind}}}
    example = "e.g. arms: {awa: {reward: {kind: awa}}, none: {reward: {kind: none}}}"
    if not isinstance(arms, dict) or not arms:
        raise DemoError(f"{path}: arms must map each arm's name to the training sections it changes ({example})")
    for name, sections in arms.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
            raise DemoError(f"{path}: arms: {name!r} is not a folder name (letters, digits, _ . -)")
        kind = (sections.get("reward") or {}).get("kind") if isinstance(sections, dict) else None
        if kind is None:
            raise DemoError(f"{path}: arms.{name} must name its reward kind (reward: {{kind: …}}), {example}")
        unknown = sorted(set(sections) - {"reward", "grpo"})
        if unknown:
            raise DemoError(f"{path}: arms.{name} may change reward and grpo only, not {unknown}: every arm starts "
                            "from the one SFT checkpoint and p_i and runs the one agent")
        shared = sorted({"temperature", "top_p"} & set(sections.get("grpo") or {}))
        if shared:
            raise DemoError(f"{path}: arms.{name} may not change grpo.{shared[0]}: p_i is sampled once, at the "
                            "recipe's grpo sampling settings, for every arm")
    return {str(k): copy.deepcopy(v) for k, v in arms.items()}


WARM_START_KEYS = ("abstain_share", "renamed_copies", "originals", "rename_ids", "clarified_share", "misread_share")


def _abstain_share(warm: Any, path: Path) -> float:
    unknown = sorted(set(warm) - set(WARM_START_KEYS)) if isinstance(warm, dict) else ["(not a mapping)"]
    if unknown:
        raise DemoError(f"{path}: warm_start: unknown key(s) {unknown}; known: {list(WARM_START_KEYS)}")
    share = warm.get("abstain_share", 1.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise DemoError(f"{path}: warm_start.abstain_share must be a number in [0, 1], got {share!r}")
    return float(share)


FLOORS = {
    "sft_accuracy_answerable": "the SFT checkpoint's held-out accuracy on answerable questions is at least this",
    "refusal_gap": "an AWA arm's held-out refusal is within this of its training target",
    "ceiling_gap": "a `none` arm's held-out accuracy on answerable questions is within this of mean(u), the "
                   "world's mean ceiling (world v2): RL neither beats the ceiling nor breaks the reader",
}
"""The quality checks a recipe's ``floors:`` may name (`awarl.demo.report.quality_checks`)."""


def _floors(raw: Any, mode: str, path: Path) -> dict[str, float]:
    """``floors.<mode>``, both modes checked whichever runs: known names (`FLOORS`), numbers; a misspelt
    floor or mode would silently check nothing."""
    if not isinstance(raw, dict):
        raise DemoError(f"{path}: floors must map full / quick to their checks, got {raw!r}")
    for key in raw:
        if key not in ("full", "quick"):
            raise DemoError(f"{path}: floors.{key} is not a mode (floors has full and quick)")
    for name_of_mode in ("full", "quick"):
        floors = raw.get(name_of_mode) or {}
        if not isinstance(floors, dict):
            raise DemoError(f"{path}: floors.{name_of_mode} must map check names to numbers, got {floors!r}")
        for name, value in floors.items():
            if name not in FLOORS:
                raise DemoError(f"{path}: floors.{name_of_mode}.{name} is not a quality check "
                                f"(known: {', '.join(FLOORS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DemoError(f"{path}: floors.{name_of_mode}.{name} must be a number, got {value!r}")
    return {name: float(value) for name, value in (raw.get(mode) or {}).items()}


def _clarified_share(warm: Any, path: Path) -> float:
    return _share(warm, "clarified_share", path)


def _share(warm: Any, key: str, path: Path) -> float:
    """``warm_start.<key>``, a share in [0, 1] (0 when absent)."""
    share = warm.get(key, 0.0) if isinstance(warm, dict) else 0.0
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise DemoError(f"{path}: warm_start.{key} must be a number in [0, 1], got {share!r}")
    return float(share)


def _renamed_copies(warm: Any, path: Path) -> int:
    copies = warm.get("renamed_copies", 0) if isinstance(warm, dict) else 0
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 0:
        raise DemoError(f"{path}: warm_start.renamed_copies must be a whole number >= 0, got {copies!r}")
    return copies


def _warm_copies(warm: Any, path: Path) -> tuple[int, bool]:
    copies = _renamed_copies(warm, path)
    return copies, _originals(warm, copies, path)


def _device(capability: Any, path: Path) -> str:
    device = capability.get("device", "cpu") if isinstance(capability, dict) else "cpu"
    if not isinstance(device, str) or not re.fullmatch(r"cpu|auto|cuda(:\d+)?", device):
        raise DemoError(f"{path}: capability.device must be cpu, auto, cuda or cuda:N, got {device!r}")
    return device


def _rename_ids(warm: Any, path: Path) -> bool:
    rename = warm.get("rename_ids", False) if isinstance(warm, dict) else False
    if not isinstance(rename, bool):
        raise DemoError(f"{path}: warm_start.rename_ids must be true or false, got {rename!r}")
    if rename and not warm.get("renamed_copies"):
        raise DemoError(f"{path}: warm_start.rename_ids: true needs warm_start.renamed_copies >= 1 (it renames the copies' ids)")
    return rename


def _originals(warm: Any, copies: int, path: Path) -> bool:
    originals = warm.get("originals", True) if isinstance(warm, dict) else True
    if not isinstance(originals, bool):
        raise DemoError(f"{path}: warm_start.originals must be true or false, got {originals!r}")
    if not originals and not copies:
        raise DemoError(f"{path}: warm_start.originals: false needs warm_start.renamed_copies >= 1")
    return originals


UNRECORDED_DEFAULTS = {"grpo.num_iterations": 1}
"""Settings named in a recipe but recorded only when they differ from the trainer's default, so a folder
started before a recipe named them still resumes."""


def settings(recipe: DemoRecipe) -> dict[str, Any]:
    """What a demo folder's stages were made with, flattened to dotted keys (floors only grade
    the report, so they may change between runs)."""
    def flat(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
        if isinstance(value, dict):
            for key, item in value.items():
                flat(f"{prefix}.{key}" if prefix else str(key), item, out)
        else:
            out[prefix] = value
        return out

    warm = {"abstain_share": recipe.abstain_share, "renamed_copies": recipe.renamed_copies,
            "originals": recipe.originals}
    if recipe.rename_ids:  # only when on, so folders started before the key existed still resume
        warm["rename_ids"] = True
    if recipe.clarified_share:  # the same
        warm["clarified_share"] = recipe.clarified_share
    if recipe.misread_share:  # the same
        warm["misread_share"] = recipe.misread_share
    raw = {"world": recipe.world, "warm_start": warm, "shape": recipe.shape,
           "capability": {"k": recipe.k}, "arms": recipe.arms, **recipe.train}
    out = flat("", raw, {})
    for key, default in UNRECORDED_DEFAULTS.items():
        if key in out and out[key] == default:
            del out[key]
    return json.loads(json.dumps(out, default=str))


def check_settings(marker: Path, recipe: DemoRecipe, folder: Path | None = None) -> None:
    """A folder of finished stages (a demo, a fidelity study) is resumed only with the settings
    it was started with, recorded in ``marker``: its stages would otherwise be reused under a
    recipe that did not make them. Refused, naming the changed fields and the folder (``folder``: the
    folder as the user named it, when ``marker`` is relative to it)."""
    now = settings(recipe)
    if marker.exists():
        before = json.loads(marker.read_text(encoding="utf-8"))
        changed = sorted(k for k in set(before) | set(now) if before.get(k, "<unset>") != now.get(k, "<unset>"))
        if changed:
            shown = ", ".join(f"{k}: {before.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r}" for k in changed[:6])
            more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
            raise DemoError(f"{folder or marker.parent} was started with other settings ({shown}{more}); use another --out, "
                            "or delete the folder to start over")
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
