"""Index folders are replaced atomically: a kill mid-build leaves the old index loadable, a rebuild
under a loaded (memory-mapped) index leaves that index intact, an interrupted swap is readable
and repaired; and the build streams (a corpus larger than the memory it may use)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from awarl.data.records import DataError, Passage
from awarl.search.bm25 import BM25Index
from awarl.search.client import open_retriever
from awarl.data.folders import recover
from awarl.search.folder import META_FILE, resolve
from awarl.search.index import load_index
from awarl.search.retriever import SearchError

ROOT = Path(__file__).resolve().parents[2]


def _corpus(tag: str, n: int = 50) -> list[Passage]:
    return [Passage(f"{tag}{i}", f"{tag} title {i}", f"{tag} passage number {i} about rivers and {tag}") for i in range(n)]


def _ids(index, query: str) -> list[str]:
    return [h.passage.id for h in index.search([query], 5)[0]]


def test_rebuild_under_a_loaded_index_leaves_it_intact(tmp_path):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("old"), out)
    loaded = load_index(out)
    before = loaded.search(["old rivers"], 5)
    BM25Index.build_folder(_corpus("new", 80), out)  # in place, while `loaded` maps the old files
    assert loaded.search(["old rivers"], 5) == before  # same hits, scores and passage texts
    assert loaded.get_passage("old3").text.startswith("old passage")
    fresh = load_index(out)
    assert len(fresh) == 80 and _ids(fresh, "new rivers")[0].startswith("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no side folders left


def test_a_kill_during_rebuild_leaves_the_old_index_loadable(tmp_path):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("old"), out)
    want = _ids(load_index(out), "old rivers")
    flag = tmp_path / "started"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from awarl.data.records import Passage
        from awarl.search.bm25 import BM25Index

        def slow():
            for i in range(100000):
                if i == 500:
                    Path({str(flag)!r}).write_text("x")
                    time.sleep(60)  # killed here, mid-build
                yield Passage(f"n{{i}}", "t", f"new passage {{i}}")

        BM25Index.build_folder(slow(), {str(out)!r}, chunk_size=100)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert (tmp_path / ".idx.awarl-new").is_dir()  # the build in progress
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _ids(load_index(out), "old rivers") == want
    BM25Index.build_folder(_corpus("new"), out)  # the next build cleans up after the dead one
    assert _ids(load_index(out), "new rivers")[0].startswith("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx", "started"]


def test_a_swap_interrupted_between_its_renames_is_readable_and_repaired(tmp_path):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("old"), out)
    BM25Index.build(_corpus("new")).save(tmp_path / "staging")
    # the crash window: the complete new folder waits as .idx.awarl-new, idx was renamed away
    (tmp_path / "staging").rename(tmp_path / ".idx.awarl-new")
    out.rename(tmp_path / ".idx.awarl-old")
    assert resolve(out) == tmp_path / ".idx.awarl-new"
    assert _ids(load_index(out), "new rivers")[0].startswith("new")  # readers read the new one, change nothing
    assert isinstance(open_retriever(str(out)), BM25Index)
    recover(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert _ids(load_index(out), "new rivers")[0].startswith("new")


def test_only_index_folders_are_replaced(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(DataError, match="not an awarl index folder; refusing"):
        BM25Index.build_folder(_corpus("a"), tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is a file"):
        BM25Index.build(_corpus("a")).save(tmp_path / "file")


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("old"), out)
    dup = _corpus("x", 5) + [Passage("x2", "", "again")]
    with pytest.raises(ValueError, match="duplicate passage id 'x2' \\(passages 3 and 6"):
        BM25Index.build_folder(dup, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert _ids(load_index(out), "old rivers")[0].startswith("old")


@pytest.mark.parametrize("damage,needle", [
    ("{not json", "broken JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"kind": "bm25", "format": 1, "passages": 50}', "settings"),
    ('{"kind": "bm25", "format": 1, "passages": "many", "settings": {}}', "passage count"),
    ('{"kind": "bm25", "format": 1, "passages": 7, "settings": {}}', "says 7 passages"),
    ('{"kind": "bm25", "format": 1, "passages": 50, "settings": {"k1": "x"}}', "bad settings"),
])
def test_damaged_metadata_is_a_clear_error(tmp_path, damage, needle):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("a"), out)
    (out / META_FILE).write_text(damage)
    with pytest.raises(DataError, match=needle) as err:
        load_index(out)
    assert META_FILE in str(err.value)


def test_damaged_arrays_are_a_clear_error(tmp_path):
    out = tmp_path / "idx"
    BM25Index.build_folder(_corpus("a"), out)
    (out / "bm25s" / "vocab.index.json").write_text(json.dumps({"a": 0}))
    with pytest.raises(DataError, match="disagree"):
        load_index(out)


def test_open_retriever_takes_a_folder_a_corpus_or_a_url(tmp_path, hotpot_index_dir):
    from awarl.data.records import write_jsonl
    from awarl.search.client import HttpRetriever

    assert isinstance(open_retriever(hotpot_index_dir), BM25Index)
    write_jsonl(tmp_path / "corpus.jsonl", (p.to_dict() for p in _corpus("c")))
    in_memory = open_retriever(str(tmp_path / "corpus.jsonl"))
    assert isinstance(in_memory, BM25Index) and len(in_memory) == 50
    assert isinstance(open_retriever("https://search.example:8443"), HttpRetriever)
    for bad, needle in [(tmp_path / "missing", "no such index folder or corpus"), (tmp_path, "not an awarl index folder"),
                        ("ftp://host/x", "only http"), (tmp_path / "corpus.jsonl.bak", "no such")]:
        with pytest.raises(SearchError, match=needle):
            open_retriever(str(bad))
    (tmp_path / "notes.txt").write_text("some notes\n")
    with pytest.raises(DataError, match="notes.txt.*line 1"):
        open_retriever(tmp_path / "notes.txt")


@pytest.mark.slow
def test_streaming_build_of_a_corpus_larger_than_its_memory_limit(tmp_path):
    """The build runs under RLIMIT_DATA (heap and private mappings) of 40 MB above what the
    interpreter already uses, and indexes a 48 MB corpus (1,000 passages a chunk); reading the corpus into memory under
    that same limit fails, so the limit is real."""
    corpus = tmp_path / "corpus.jsonl"
    words = [f"w{i}x" for i in range(3000)]
    with corpus.open("w") as fh:
        i = 0
        while fh.tell() < 48 * 2**20:
            text = " ".join(words[(i * 7 + j * j) % 3000] for j in range(150))
            fh.write(json.dumps({"id": f"p{i}", "title": "", "text": text}) + "\n")
            i += 1
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from awarl.data.records import Passage, iter_jsonl
        from awarl.search.bm25 import BM25Index
        import bm25s, Stemmer, numpy  # imported before the limit is set
        vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmData:")) * 1024
        limit = vm + 40 * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        n = BM25Index.build_folder((Passage.from_dict(r) for _, r in iter_jsonl({str(corpus)!r})), {str(tmp_path / "idx")!r},
                                   chunk_size=1000)
        print("built", n)
        try:
            data = open({str(corpus)!r}, encoding="utf-8").read()
            print("read whole corpus", len(data))
        except MemoryError:
            print("whole corpus does not fit")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"built {i}" in proc.stdout and "whole corpus does not fit" in proc.stdout
    index = load_index(tmp_path / "idx")
    assert len(index) == i and index.search(["w5x"], 3)[0]
