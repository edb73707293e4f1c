import json
import subprocess
import sys


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "awarl.cli", "data", *args], capture_output=True, text=True, timeout=120)


def test_prepare_and_merge(sample_files, tmp_path):
    out = run_cli("prepare", "--dataset", "hotpotqa", "--input", str(sample_files["hotpotqa"]), "--out", str(tmp_path / "h"))
    assert out.returncode == 0 and "40 records (40 answerable, 0 unanswerable), 391 passages" in out.stdout
    out = run_cli("prepare", "--dataset", "musique", "--input", str(sample_files["musique_full"]), "--out", str(tmp_path / "m"))
    assert "10 records (5 answerable, 5 unanswerable), 200 passages" in out.stdout
    out = run_cli("merge", str(tmp_path / "h"), str(tmp_path / "m"), "--out", str(tmp_path / "all"))
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (tmp_path / "all/records.jsonl").read_text().splitlines()]
    corpus = [json.loads(line) for line in (tmp_path / "all/corpus.jsonl").read_text().splitlines()]
    assert len(records) == 50 and {r["dataset"] for r in records} == {"hotpotqa", "musique"}
    assert len({p["id"] for p in corpus}) == len(corpus) == 591
    again = run_cli("merge", str(tmp_path / "h"), str(tmp_path / "h"), "--out", str(tmp_path / "dup"))
    assert again.returncode == 1 and "already in" in again.stderr


def test_prepare_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"_id": "x"}]')
    out = run_cli("prepare", "--dataset", "hotpotqa", "--input", str(bad), "--out", str(tmp_path / "o"))
    assert out.returncode == 1 and "index 0" in out.stderr and "'question'" in out.stderr
    assert not (tmp_path / "o" / "records.jsonl").exists()
    out = run_cli("prepare", "--dataset", "nope", "--input", str(bad), "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "unknown dataset" in out.stderr
