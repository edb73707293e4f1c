"""Fixtures for the chat tests: settings on a temp SQLite file, a started ThreadManager, a small world.

Generators are `ScriptedGenerator`s (real loop, real Z3 checks, real SQLite; only the model's
replies are scripted); the tiny-model test uses a real checkpoint.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from awarl.chat.config import ChatSettings
from awarl.chat.manager import ThreadManager

ROOT = Path(__file__).resolve().parents[2]
PRICING = ROOT / "configs" / "policies" / "pricing.yaml"

GOLD_80 = "I am a gold member buying a regular-priced jacket for $80. What discount do I get?"
GOLD_UNKNOWN = "I am a gold member. What discount do I get?"
CONTRADICTORY = "My order is $30. Actually my order is $90. I am a gold member."

# A policy whose check cannot finish: the sum of two positive cubes equal to a cube (no solution,
# but nonlinear integer arithmetic makes Z3 give up) — the TOO_COMPLEX path, deterministically.
CUBES = {
    "version": "1.0",
    "variables": [
        {"name": "x", "type": "int", "description": "first number", "role": "premise"},
        {"name": "y", "type": "int", "description": "second number", "role": "premise"},
        {"name": "z", "type": "int", "description": "third number", "role": "premise"},
        {"name": "cubes_match", "type": "bool", "description": "x^3 + y^3 = z^3", "role": "claim",
         "patterns": [{"phrase": "the cubes add up", "value": True}]},
    ],
    "rules": [
        {"id": "positive", "expression": "(and (> x 0) (> y 0) (> z 0))", "description": "All numbers are positive."},
        {"id": "cubes", "expression": "(=> cubes_match (= (+ (* x x x) (* y y y)) (* z z z)))",
         "description": "The cubes add up when x cubed plus y cubed is z cubed."},
    ],
}


ADMIN = "admin-token-for-the-chat-tests"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def settings_for(tmp_path: Path, **kw) -> ChatSettings:
    base = dict(policy=str(PRICING), db=str(tmp_path / "chat.sqlite"), audit=str(tmp_path / "audit.jsonl"),
                backoff_s=0.01, workers=2, question_timeout_s=60.0, admin_token=ADMIN)
    base.update(kw)
    return ChatSettings(**base)


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL and stops it after."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def make_manager(tmp_path) -> Iterator[Callable[..., ThreadManager]]:
    """``make_manager(scripted=None, **settings)``: a started manager on a temp database, serving the
    scripted generator when one is given."""
    managers: list[ThreadManager] = []

    def make(scripted=None, **kw) -> ThreadManager:
        gens = {}
        if scripted is not None:
            gens = {"scripted": scripted}
            kw.setdefault("generator", "scripted")
        m = ThreadManager(settings_for(tmp_path, **kw), generators=gens).start()
        managers.append(m)
        return m

    yield make
    for m in managers:
        m.close()


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory) -> Path:
    """A small synthetic world (corpus, policy) written once."""
    from awarl.data.world import WorldConfig, generate_world, write_world

    folder = tmp_path_factory.mktemp("world")
    write_world(generate_world(WorldConfig(persons=30, cities=8, countries=4, seed=0)), folder)
    return folder


@pytest.fixture(scope="session")
def world(world_dir):
    from awarl.data.world import WorldConfig, generate_world

    return generate_world(WorldConfig(persons=30, cities=8, countries=4, seed=0))


@pytest.fixture
def cubes_policy(tmp_path) -> Path:
    path = tmp_path / "cubes.yaml"
    path.write_text(yaml.safe_dump(CUBES), encoding="utf-8")
    return path
