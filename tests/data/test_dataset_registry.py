"""The dataset registry is the one place a benchmark is added: a format registered there is listed
by the commands' help, read by `awarl data prepare` and told apart from the others by its markers."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from awarl.data.adapters import FORMATS, DatasetFormat, format_evidence, get_format
from awarl.errors import ConfigError

# A newcomer's format, registered before the commands are built (as an entry in adapters.py is);
# each command then runs in-process through the root command, and its exit code and output print.
NEWCOMER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from awarl.data.adapters import DatasetFormat, check_format, jsonl_rows, register, required_field
    from awarl.data.records import QARecord

    def load_toyqa(path: Path):
        records = []
        for lineno, row in jsonl_rows(path, "toyqa"):
            where = f"line {lineno}"
            check_format(row, "toyqa", path, where)
            qid, question = required_field(row, "qid", str, path, where), required_field(row, "q", str, path, where)
            gold = required_field(row, "toy_gold", str, path, where)
            records.append(QARecord(qid, question, [gold], "toyqa", True, [], [], {}))
        return records, []

    register(DatasetFormat("toyqa", "ToyQA", "jsonl", load_toyqa, markers=frozenset({"toy_gold"})))

    from typer.testing import CliRunner
    from awarl.cli import app
    for argv in json.loads(sys.argv[1]):
        result = CliRunner().invoke(app, argv)
        print(json.dumps([result.exit_code, result.output]))
''')


def _run_with_newcomer(*argvs):
    proc = subprocess.run([sys.executable, "-c", NEWCOMER, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_a_registered_format_is_listed_read_and_told_apart(tmp_path, sample_files):
    toy = tmp_path / "toy.jsonl"
    toy.write_text(json.dumps({"qid": "t1", "q": "Who?", "toy_gold": "Ada"}) + "\n", encoding="utf-8")
    out = tmp_path / "prepared"
    help_prepare, help_score, help_run, prepared, as_musique, hotpot_as_toy = _run_with_newcomer(
        ["data", "prepare", "--help"], ["eval", "score", "--help"], ["eval", "run", "--help"],
        ["data", "prepare", "--dataset", "toyqa", "--input", str(toy), "--out", str(out)],
        ["data", "prepare", "--dataset", "musique", "--input", str(toy), "--out", str(tmp_path / "m")],
        ["data", "prepare", "--dataset", "toyqa", "--input", str(sample_files["musique"]), "--out", str(tmp_path / "h")],
    )
    for code, text in (help_prepare, help_score, help_run):
        assert code == 0 and "hotpotqa, 2wiki, musique, flashrag, toyqa" in text
    assert prepared == [0, f"toyqa: 1 records (1 answerable, 0 unanswerable), 0 passages -> {out}\n"]
    record = json.loads((out / "records.jsonl").read_text(encoding="utf-8"))
    assert (record["id"], record["answers"], record["dataset"]) == ("t1", ["Ada"], "toyqa")
    assert as_musique[0] == 1 and "looks like a ToyQA example ('toy_gold'), not MuSiQue: use --dataset toyqa" in as_musique[1]
    assert hotpot_as_toy[0] == 1 and "looks like a MuSiQue example" in hotpot_as_toy[1]
    assert "not ToyQA: use --dataset musique" in hotpot_as_toy[1]


def test_an_unknown_name_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown dataset 'nope'; choose one of hotpotqa, 2wiki, musique, flashrag"):
        get_format("nope")


def test_fields_shared_by_formats_tell_the_group_apart():
    own, shared = format_evidence({"_id": "a", "context": [], "golden_answers": []})
    assert own == {"flashrag": ["'golden_answers'"]}
    assert shared == {("hotpotqa", "2wiki"): ["'_id'", "'context'"]}


def test_every_registered_format_is_in_the_docs_table():
    table = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text(encoding="utf-8")
    missing = [name for name in FORMATS if f"| `{name}` |" not in table]
    assert not missing, f"docs/data.md's --dataset table lacks {missing}"
    assert all(isinstance(f, DatasetFormat) and f.loader for f in FORMATS.values())
