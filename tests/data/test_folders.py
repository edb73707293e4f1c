"""`replace_folder`: a prepared folder is replaced whole or not at all, and a crash at any step of
the swap is finished or undone at the next start."""

import subprocess
import sys

import pytest

from awarl.data.folders import recover, replace_folder
from awarl.data.records import DataError


def _folder(path, **files):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path):
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_replace_new_empty_and_existing(tmp_path):
    out = tmp_path / "out"
    with replace_folder(out) as staging:
        (staging / "records.jsonl").write_text("new\n")
    assert _contents(out) == {"records.jsonl": "new\n"}
    with pytest.raises(DataError, match=r"out: already holds records.jsonl; pass --force"):
        with replace_folder(out) as staging:
            raise AssertionError("not reached")
    with replace_folder(out, force=True, owned=("records.jsonl", "corpus.jsonl")) as staging:
        (staging / "corpus.jsonl").write_text("c\n")
    assert _contents(out) == {"corpus.jsonl": "c\n"}  # the old records.jsonl went with the old folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, old copy or lock left


def test_force_never_deletes_files_it_does_not_own(tmp_path):
    out = _folder(tmp_path / "out", **{"records.jsonl": "r", "notes.txt": "mine"})
    with pytest.raises(DataError, match="also holds notes.txt, which --force would delete"):
        with replace_folder(out, force=True, owned=("records.jsonl", "corpus.jsonl")):
            raise AssertionError("not reached")
    assert _contents(out) == {"notes.txt": "mine", "records.jsonl": "r"}


def test_out_that_is_a_file(tmp_path):
    out = tmp_path / "out"
    out.write_text("x")
    with pytest.raises(DataError, match=r"out: is a file; the output must be a folder"):
        with replace_folder(out, force=True):
            raise AssertionError("not reached")


def test_failure_while_building_leaves_the_old_folder(tmp_path):
    out = _folder(tmp_path / "out", **{"records.jsonl": "old"})
    with pytest.raises(RuntimeError, match="disk full"):
        with replace_folder(out, force=True) as staging:
            (staging / "records.jsonl").write_text("half")
            raise RuntimeError("disk full")
    assert _contents(out) == {"records.jsonl": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    "left,expected",
    [
        # crashed while building: the unfinished new folder is dropped, the old one stays
        ({"out": "old", ".out.awarl-new": "half"}, "old"),
        # crashed between the two renames: the finished new folder is published
        ({".out.awarl-old": "old", ".out.awarl-new": "new"}, "new"),
        # crashed before the clean-up: the old copy is deleted
        ({"out": "new", ".out.awarl-old": "old"}, "new"),
        # an old copy alone (nothing newer): it is put back
        ({".out.awarl-old": "old"}, "old"),
    ],
)
def test_recover_each_crash_state(tmp_path, left, expected):
    for name, text in left.items():
        _folder(tmp_path / name, **{"records.jsonl": text})
    recover(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert _contents(tmp_path / "out") == {"records.jsonl": expected}


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path):
    out = tmp_path / "out"
    with replace_folder(out) as staging:
        (staging / "a").write_text("1")
        code = ("import sys; from awarl.data.folders import replace_folder\n"
                "try:\n    with replace_folder(sys.argv[1]): pass\n"
                "except ValueError as exc: print(exc)\n")
        other = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60)
        assert "another process is writing this folder" in other.stdout, other.stderr
        assert (staging / "a").exists()  # the second writer did not treat our staging folder as a leftover
    assert _contents(out) == {"a": "1"}


def test_kill_at_any_moment_leaves_old_or_new_never_a_mix(tmp_path):
    """A real SIGKILL at several points of a build and swap: after recovery the folder is always
    the old one or the new one, whole."""
    code = (
        "import sys, time\nfrom awarl.data.folders import replace_folder\n"
        "with replace_folder(sys.argv[1], force=True) as st:\n"
        "    for i in range(40):\n"
        "        (st / f'f{i}').write_text('new')\n"
        "        time.sleep(0.002)\n"
        "print('done', flush=True)\n"
    )
    out = tmp_path / "out"
    _folder(out, **{f"f{i}": "old" for i in range(40)})
    outcomes = set()
    for delay in (0.0, 0.05, 0.1, 0.2, 0.4, 2.0):
        proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        recover(out)
        values = set(_contents(out).values())
        assert len(_contents(out)) == 40 and len(values) == 1, _contents(out)
        outcomes |= values
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".out.awarl-lock") == ["out"]
        for f in out.iterdir():  # back to the old contents for the next round
            f.write_text("old")
    assert "new" in outcomes  # the longest wait let a run finish


def test_the_current_folder_or_one_above_it_is_refused(tmp_path, monkeypatch):
    work = _folder(tmp_path / "work", **{"records.jsonl": "r"})
    monkeypatch.chdir(work)
    for out in (".", "..", str(work)):
        with pytest.raises(DataError, match="is the current folder or holds it"):
            with replace_folder(out, force=True):
                raise AssertionError("not reached")
    assert _contents(work) == {"records.jsonl": "r"}
