"""Fixtures of the reward tests: the local OpenAI-compatible judge replay server."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("reward_judge_replay", Path(__file__).with_name("reward_judge_replay.py"))
reward_judge_replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reward_judge_replay)


@pytest.fixture
def replay_server():
    """Start a `ReplayJudgeServer` on 127.0.0.1: ``with replay_server(latency_s=…) as srv``."""
    return reward_judge_replay.ReplayJudgeServer
