"""A wheel of awarl carries configs/ as package data: installed outside the repository and run from
another folder, `awarl demo --quick --until world` and `awarl chat serve` start with their shipped
defaults (the demo recipe, the chat's policies and corrections).

The wheel is built from a copy of the working tree and installed with ``--target`` on top of this
environment's dependencies, so only the packaging is under test; README "Layout" has the same
check in a fresh virtual environment."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """awarl installed from a freshly built wheel into a folder of its own."""
    work = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    src = work / "src"
    for name in filter(None, files):
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():
            target.symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", ".", "--no-deps", "--no-build-isolation", "-w", str(work / "dist")], cwd=src,
                   check=True, capture_output=True, timeout=300)
    wheel = next((work / "dist").glob("awarl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "awarl/configs/demo_world.yaml" in names and "awarl/configs/policies/pricing.yaml" in names
    assert not any(n.startswith("configs/") for n in names)  # inside the package, not a top-level folder
    subprocess.run([*pip, "install", "--no-deps", "--target", str(work / "site"), str(wheel)], check=True,
                   capture_output=True, timeout=300)
    return work / "site"


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_the_installed_demo_finds_its_recipe(installed, tmp_path):
    code = "import awarl.resources as r; print(r.config_path('demo_world.yaml'))"
    where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(installed), capture_output=True,
                           text=True, check=True).stdout.strip()
    assert where.startswith(str(installed)) and Path(where).is_file()
    out = subprocess.run([sys.executable, "-m", "awarl.cli", "demo", "--quick", "--until", "world", "--out",
                          str(tmp_path / "dq"), "--no-progress"], cwd=tmp_path, env=_env(installed),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "dq" / "world" / "policy.yaml").is_file()


@pytest.mark.slow
def test_the_installed_chat_server_starts_with_its_defaults(installed, tmp_path):
    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "awarl.cli", "chat", "serve", "--port", str(port)],
                                cwd=tmp_path, env=_env(installed), stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                health = _get(port, "/api/health")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
                time.sleep(1)
        config = _get(port, "/api/config")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert health["ok"] and health["mode"] and "Validate-only" in health["mode_note"]
    assert {"pricing", "benefits"} <= set(config["policies"])  # the shipped policies, found inside the wheel


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return json.loads(resp.read())
