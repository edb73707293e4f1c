"""`awarl index build`, `awarl search query` and `awarl search serve` (a real process on loopback)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from awarl.cli import app
from awarl.data.records import write_jsonl

runner = CliRunner()


@pytest.fixture(scope="module")
def built(hotpot_prepared, tmp_path_factory):
    records, passages = hotpot_prepared
    root = tmp_path_factory.mktemp("cli")
    write_jsonl(root / "corpus.jsonl", (p.to_dict() for p in passages))
    result = runner.invoke(app, ["index", "build", "--corpus", str(root / "corpus.jsonl"), "--out", str(root / "idx")])
    assert result.exit_code == 0, result.output
    assert f"bm25 index of {len(passages)} passages" in result.output
    return root / "idx", records


def test_query_prints_result_lines(built):
    index_dir, records = built
    r = records[0]
    result = runner.invoke(app, ["search", "query", "--index", str(index_dir), r.question, "-k", "2", "--max-tokens", "5"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"# {r.question}" and len(lines) == 3
    assert all(line.startswith("[d") and line.endswith("…") for line in lines[1:])


def test_query_json_and_closed_scope(built):
    index_dir, records = built
    r = records[1]
    args = ["search", "query", "--index", str(index_dir), r.question, "--json", "-k", "20", "--allowed", ",".join(r.passages)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["hits"]
    assert hits and {h["id"] for h in hits} <= set(r.passages) and {"title", "text", "score"} <= set(hits[0])


def test_errors_exit_nonzero_with_a_message(built, tmp_path):
    index_dir, _ = built
    result = runner.invoke(app, ["search", "query", "--index", str(tmp_path), "x"])
    assert result.exit_code == 1 and "not an awarl index folder" in result.output
    result = runner.invoke(app, ["search", "query", "--index", str(index_dir), "x", "--allowed", "nope"])
    assert result.exit_code == 1 and "unknown passage id 'nope'" in result.output
    (tmp_path / "corpus.jsonl").write_text('{"id": "d1", "text": "ok"}\n{"id": "d2"}\n')
    result = runner.invoke(app, ["index", "build", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "line 2" in result.output and "'text'" in result.output
    result = runner.invoke(app, ["index", "build", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "o"), "--kind", "sparse"])
    assert result.exit_code != 0


def test_serve_runs_a_real_server(built):
    pytest.importorskip("uvicorn", reason="the server needs the 'serve' extra")
    index_dir, records = built
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "awarl.cli", "search", "serve", "--index", str(index_dir), "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        resp = httpx.post(f"{url}/retrieve", json={"queries": [records[0].question], "topk": 2, "return_scores": True})
        assert resp.status_code == 200 and len(resp.json()["result"][0]) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)
