"""`awarl index build`, `awarl search query` and `awarl search serve` (a real process on loopback)."""

from __future__ import annotations

import json
import os
import re
import signal
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
    assert all(re.fullmatch(r".*: .* … \[d\w+\]", line) for line in lines[1:])


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
    port = _free_port()
    cmd = [sys.executable, "-m", "awarl.cli", "search", "serve", "--index", str(index_dir), "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_up(url, proc)
        resp = httpx.post(f"{url}/retrieve", json={"queries": [records[0].question], "topk": 2, "return_scores": True})
        assert resp.status_code == 200 and len(resp.json()["result"][0]) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "server did not come up"
        time.sleep(0.2)


def test_serve_with_workers_shares_one_index_and_survives_a_rebuild(built, tmp_path):
    """Two forked workers answer on one port; rebuilding the served folder in place (with a
    different corpus) changes nothing for them: same answers from every worker, no crash; a
    killed worker is replaced by one serving the same (old) index."""
    pytest.importorskip("uvicorn", reason="the server needs the 'serve' extra")
    from concurrent.futures import ThreadPoolExecutor

    from awarl.data.records import Passage
    from awarl.search.bm25 import BM25Index
    from awarl.search.index import load_index

    index_dir, records = built
    served = tmp_path / "served"
    load_index(index_dir).save(served)
    questions = [r.question for r in records]
    want = {q: [h.passage.id for h in hits] for q, hits in zip(questions, load_index(served).search(questions, 3))}
    port = _free_port()
    cmd = [sys.executable, "-m", "awarl.cli", "search", "serve", "--index", str(served), "--port", str(port),
           "--workers", "2", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, proc)

        def ask(i: int) -> tuple[str, list[str], int]:
            q = questions[i % len(questions)]
            with httpx.Client(base_url=url, timeout=30) as http:  # new connections spread over the workers
                resp = http.post("/retrieve", json={"queries": [q], "topk": 3})
                worker = http.get("/health").json()["worker"]
            return q, [d["id"] for d in resp.json()["result"][0]], worker

        with ThreadPoolExecutor(max_workers=16) as pool:
            first = list(pool.map(ask, range(96)))
        BM25Index.build_folder([Passage(f"z{i}", "Zed", f"unrelated text {i}") for i in range(20)], served)
        with ThreadPoolExecutor(max_workers=16) as pool:
            second = list(pool.map(ask, range(96)))
        assert proc.poll() is None
        # a worker that dies is replaced, forked from the same loaded index
        victim = second[0][2]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            with ThreadPoolExecutor(max_workers=16) as pool:
                third = list(pool.map(ask, range(48)))
            if victim not in {w for _, _, w in third} and len({w for _, _, w in third}) == 2:
                break
            assert time.monotonic() < deadline, "the killed worker was not replaced"
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert all(ids == want[q] for q, ids, _ in first + second + third)
    assert len({w for _, _, w in first + second}) == 2  # both workers answered
    assert proc.returncode == 0 or proc.returncode == -15


@pytest.mark.parametrize("args,needle", [
    (["--port", "99999"], "--port 99999 is out of range"),
    (["--port", "0"], "out of range"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_serve_rejects_bad_options_without_a_traceback(built, args, needle):
    index_dir, _ = built
    result = runner.invoke(app, ["search", "serve", "--index", str(index_dir), *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output  # a bad command line


def test_serve_on_a_busy_port_and_a_damaged_index_are_clear_errors(built, tmp_path):
    index_dir, _ = built
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        result = runner.invoke(app, ["search", "serve", "--index", str(index_dir), "--port", str(s.getsockname()[1])])
    assert result.exit_code == 1 and "cannot listen on 127.0.0.1" in result.output
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "awarl_index.json").write_text("{oops")
    result = runner.invoke(app, ["search", "serve", "--index", str(damaged), "--port", str(_free_port())])
    assert result.exit_code == 1 and "awarl_index.json" in result.output and "broken JSON" in result.output


def test_build_prints_no_stuck_progress_bars_and_replaces_in_place(built, tmp_path):
    index_dir, _ = built
    corpus = index_dir.parent / "corpus.jsonl"
    out = tmp_path / "idx"
    for _ in range(2):  # the second build replaces the first
        result = runner.invoke(app, ["index", "build", "--corpus", str(corpus), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "0%" not in result.output and "BM25S" not in result.output and "Split strings" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("x")
    result = runner.invoke(app, ["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "notes")])
    assert result.exit_code == 1 and "refusing to replace it" in result.output
    result = runner.invoke(app, ["index", "build", "--corpus", str(tmp_path), "--out", str(out)])
    assert result.exit_code == 1 and "is a folder" in result.output
