"""A real 2-process run (torchrun, gloo on CPU): global rates and the penalty agree on both
processes and equal the single-process values on the same data."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from awarl.rewards import AnswerAbstainReward, RewardConfig

WORKER = Path(__file__).with_name("dist_reward_worker.py")
_spec = importlib.util.spec_from_file_location("dist_reward_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

GLOBAL_KEYS = ("awa/refusal_rate", "awa/expected_refusal_rate", "awa/E", "awa/E_ema", "awa/penalty",
               "awa/precision", "awa/accuracy", "awa/ra_f1", "awa/all_abstain_groups")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_agree_with_one(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(WORKER), str(tmp_path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]

    single = worker.run(AnswerAbstainReward(RewardConfig(beta=0.5)), worker.batches())
    penalties = set()
    for step, one in enumerate(single):
        r0, r1 = ranks[0]["steps"][step], ranks[1]["steps"][step]
        for key in GLOBAL_KEYS:
            assert r0["metrics"][key] == r1["metrics"][key] == one["metrics"][key], (step, key)
        assert r0["state"] == r1["state"] == one["state"]
        assert r0["rewards"] + r1["rewards"] == one["rewards"]
        penalties.add(one["metrics"]["awa/penalty"])
    # The data move the penalty both ways, so agreement is not the trivial P = 0 everywhere.
    assert min(penalties) < 0 < max(penalties)
    # A prompt split across the processes still counts as one group.
    assert 0 < max(s["metrics"]["awa/all_abstain_groups"] for s in single)
