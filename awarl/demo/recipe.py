"""The demo recipe (`configs/demo_world.yaml`): loading, ``--quick`` and ``--set`` overrides, and the
settings a demo folder was started with (``recipe.json``), checked on every resume."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.errors import ConfigError
from awarl.resources import config_path

DEFAULT_RECIPE = config_path("demo_world.yaml")
DEMO_KEYS = ("world", "warm_start", "shape", "capability", "quick", "floors")
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
        floors = raw.get("floors") or {}
        floors = dict(floors.get("quick" if quick else "full") or {})
        return cls(world, _abstain_share(raw.get("warm_start") or {}, path), dict(raw.get("shape") or {}),
                   int(capability.get("k", 8)), train, floors, str(path))


def _abstain_share(warm: Any, path: Path) -> float:
    unknown = sorted(set(warm) - {"abstain_share"}) if isinstance(warm, dict) else ["(not a mapping)"]
    if unknown:
        raise DemoError(f"{path}: warm_start: unknown key(s) {unknown}; known: ['abstain_share']")
    share = warm.get("abstain_share", 1.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise DemoError(f"{path}: warm_start.abstain_share must be a number in [0, 1], got {share!r}")
    return float(share)


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

    raw = {"world": recipe.world, "warm_start": {"abstain_share": recipe.abstain_share}, "shape": recipe.shape,
           "capability": {"k": recipe.k}, **recipe.train}
    return json.loads(json.dumps(flat("", raw, {}), default=str))


def check_settings(marker: Path, recipe: DemoRecipe) -> None:
    """A folder of finished stages (a demo, a fidelity study) is resumed only with the settings
    it was started with, recorded in ``marker``: its stages would otherwise be reused under a
    recipe that did not make them. Refused, naming the changed fields."""
    now = settings(recipe)
    if marker.exists():
        before = json.loads(marker.read_text(encoding="utf-8"))
        changed = sorted(k for k in set(before) | set(now) if before.get(k, "<unset>") != now.get(k, "<unset>"))
        if changed:
            shown = ", ".join(f"{k}: {before.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r}" for k in changed[:6])
            more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
            raise DemoError(f"{marker.parent} was started with other settings ({shown}{more}); use another --out, "
                            "or delete the folder to start over")
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
