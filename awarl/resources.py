"""What awarl ships besides code: the recipes, chat configs, policies and accelerate configs of the
repository's top-level ``configs/`` folder.

The package reaches that folder as ``awarl/configs`` (a link in the repository, real files in a
wheel), so a command finds its defaults the same way from a checkout, an editable install or a
wheel installed anywhere. This module imports nothing of awarl.
"""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).resolve().parent / "configs"
"""The shipped ``configs/`` folder."""


def config_path(*parts: str) -> Path:
    """A shipped config file or folder: ``config_path("chat", "pricing.yaml")``.

    >>> config_path("demo_world.yaml").is_file()
    True
    """
    return CONFIGS.joinpath(*parts)


__all__ = ["CONFIGS", "config_path"]
