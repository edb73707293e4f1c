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


# -- hardening: output folders, format errors, encodings -------------------------------------------

def _prepare(sample, dataset, out, *extra):
    return run_cli("prepare", "--dataset", dataset, "--input", str(sample), "--out", str(out), *extra)


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_prepare_refuses_existing_output_unless_force(sample_files, tmp_path):
    out = tmp_path / "out"
    assert _prepare(sample_files["hotpotqa"], "hotpotqa", out).returncode == 0
    before = _files(out)
    again = _prepare(sample_files["musique"], "musique", out)
    assert again.returncode == 1
    assert f"error: {out}: already holds corpus.jsonl, records.jsonl; pass --force" in again.stderr
    assert _files(out) == before
    forced = _prepare(sample_files["musique"], "musique", out, "--force")
    assert forced.returncode == 0, forced.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["dataset"] for r in records} == {"musique"} and len(records) == 40
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failed_prepare_leaves_the_previous_output_whole(sample_files, tmp_path):
    """Bad input on a --force rerun: the old records and corpus stay together, nothing else appears."""
    out = tmp_path / "out"
    assert _prepare(sample_files["hotpotqa"], "hotpotqa", out).returncode == 0
    before = _files(out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "question": "q", "answer": "a", "paragraphs": []}\n{broken\n')
    failed = _prepare(bad, "musique", out, "--force")
    assert failed.returncode == 1 and "line 2: broken JSON" in failed.stderr
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "out"]


def test_disk_full_while_writing_leaves_the_previous_output_whole(sample_files, tmp_path):
    """A real write failure: the file-size limit (RLIMIT_FSIZE) makes the corpus write fail with
    EFBIG mid-file, as a full disk would (ENOSPC)."""
    import resource
    import signal

    out = tmp_path / "out"
    assert _prepare(sample_files["hotpotqa"], "hotpotqa", out).returncode == 0
    before = _files(out)

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    proc = subprocess.run([sys.executable, "-m", "awarl.cli", "data", "prepare", "--dataset", "musique", "--input",
                           str(sample_files["musique"]), "--out", str(out), "--force"],
                          capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (f"error: {out}: could not write the output (File too large); its previous contents are unchanged"
            in " ".join(proc.stderr.split()))
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_prepare_finishes_a_swap_interrupted_between_renames(sample_files, tmp_path):
    """State left by a kill between the two renames: no `out`, the old copy and the finished new
    folder beside it. The next start publishes the new folder, then applies its own rules."""
    out = tmp_path / "out"
    assert _prepare(sample_files["hotpotqa"], "hotpotqa", tmp_path / ".out.awarl-new").returncode == 0
    assert _prepare(sample_files["musique"], "musique", tmp_path / ".out.awarl-old").returncode == 0
    result = _prepare(sample_files["2wiki"], "2wiki", out)
    assert result.returncode == 1 and "already holds" in result.stderr
    assert "finished replacing it" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert json.loads((out / "records.jsonl").read_text().splitlines()[0])["dataset"] == "hotpotqa"


def test_out_that_is_a_file_and_input_that_is_a_folder(sample_files, tmp_path):
    target = tmp_path / "taken"
    target.write_text("x")
    out = _prepare(sample_files["hotpotqa"], "hotpotqa", target)
    assert out.returncode == 1 and out.stderr.strip() == f"error: {target}: is a file; the output must be a folder"
    out = _prepare(tmp_path, "hotpotqa", tmp_path / "o")
    assert out.returncode == 1 and out.stderr.strip() == f"error: {tmp_path}: is a folder; expected a file"
    assert target.read_text() == "x"


def test_wrong_format_and_shape_are_named(sample_files, tmp_path):
    out = _prepare(sample_files["2wiki"], "hotpotqa", tmp_path / "a")
    assert out.returncode == 1 and "looks like a 2WikiMultiHopQA example" in out.stderr
    out = _prepare(sample_files["musique"], "hotpotqa", tmp_path / "b")
    assert out.returncode == 1 and "this looks like JSON lines" in out.stderr and "Extra data" not in out.stderr
    out = _prepare(sample_files["hotpotqa"], "musique", tmp_path / "c")
    assert out.returncode == 1 and "this looks like one JSON list" in out.stderr
    assert not any(p.exists() for p in (tmp_path / "a", tmp_path / "b", tmp_path / "c"))


def test_non_utf8_input_is_an_error_line_not_a_traceback(tmp_path):
    bad = tmp_path / "latin.jsonl"
    bad.write_bytes('{"id": "1", "question": "Qué?", "golden_answers": ["a"]}\n'.encode("latin-1"))
    out = _prepare(bad, "flashrag", tmp_path / "o")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    offset = bad.read_bytes().index(b"\xe9")
    assert f"{bad}, line 1: not UTF-8 text: byte b'\\xe9' at byte offset {offset}" in " ".join(out.stderr.split())


def test_empty_input_warns(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    out = _prepare(empty, "hotpotqa", tmp_path / "o")
    assert out.returncode == 0 and "warning:" in out.stderr and "0 records" in out.stderr
    assert (tmp_path / "o" / "records.jsonl").read_text() == ""


def test_merge_refuses_existing_output_and_conflicting_passages(sample_files, tmp_path):
    assert _prepare(sample_files["hotpotqa"], "hotpotqa", tmp_path / "h").returncode == 0
    assert _prepare(sample_files["musique"], "musique", tmp_path / "m").returncode == 0
    out = run_cli("merge", str(tmp_path / "h"), str(tmp_path / "m"), "--out", str(tmp_path / "h"))
    assert out.returncode == 1 and "already holds" in out.stderr
    out = run_cli("merge", str(tmp_path / "h"), str(tmp_path / "m"), "--out", str(tmp_path / "h"), "--force")
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "h" / "records.jsonl").read_text().splitlines()) == 80
    # the same passage id with other text in a second folder would silently change what a citation means
    other = tmp_path / "x"
    other.mkdir()
    first = json.loads((tmp_path / "m" / "corpus.jsonl").read_text().splitlines()[0])
    (other / "records.jsonl").write_text("")
    (other / "corpus.jsonl").write_text(json.dumps({**first, "text": "changed"}) + "\n")
    out = run_cli("merge", str(tmp_path / "m"), str(other), "--out", str(tmp_path / "mx"))
    assert out.returncode == 1 and f"names a different passage in {tmp_path / 'm' / 'corpus.jsonl'}" in out.stderr
