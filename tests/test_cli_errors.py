"""Every command reports bad input as one `error:` line naming the file (never a traceback), its
help shows flags as flags, and library warnings reach the user as `warning:` lines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from awarl.data.records import DataError


def awarl(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "awarl.cli", *args], capture_output=True, text=True, timeout=120,
                          **kwargs)


@pytest.mark.parametrize("group", [(), ("data", "prepare"), ("eval", "score")])
def test_help_shows_flags_without_a_value(group):
    out = awarl(*group, "--help")
    assert out.returncode == 0, out.stderr
    assert "--help" in out.stdout
    assert "<bool>" not in out.stdout
    help_line = next(line for line in out.stdout.splitlines() if "--help" in line)
    assert help_line.split("--help", 1)[1].split()[0] == "Show"  # the description follows the flag directly


def test_version_is_a_flag():
    out = awarl("--version")
    assert out.returncode == 0 and out.stdout.startswith("awarl ")
    assert "<bool>" not in awarl("--help").stdout.split("--version", 1)[1].splitlines()[0]


def test_an_uncaught_os_error_is_one_error_line(tmp_path):
    """`eval report --out` under a path whose parent is a file: the OS error names the path."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"per_dataset": {}, "macro": {}}))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = awarl("eval", "report", str(run), "--out", str(blocker / "report"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {blocker / 'report'}: Not a directory"
    debug = awarl("eval", "report", str(run), "--out", str(blocker / "report"), env={"AWARL_DEBUG": "1", "PATH": ""})
    assert "Traceback" in debug.stderr  # AWARL_DEBUG=1 keeps the traceback for bug reports


def test_report_out_that_is_a_file_and_a_corrupt_metrics_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text('{"per_dataset": {}, "macro": ')
    out = awarl("eval", "report", str(run), "--out", str(tmp_path / "r"))
    assert out.returncode == 1
    assert out.stderr.strip() == f"error: {run / 'metrics.json'}, line 1: broken JSON (Expecting value at column 30)"
    (run / "metrics.json").write_text(json.dumps({"per_dataset": [], "macro": {}}))
    out = awarl("eval", "report", str(run), "--out", str(tmp_path / "r"))
    assert out.stderr.strip() == f"error: {run / 'metrics.json'}, field 'per_dataset': expected an object, got a list"
    (run / "metrics.json").write_text(json.dumps({"per_dataset": {}, "macro": {}}))
    target = tmp_path / "taken"
    target.write_text("x")
    out = awarl("eval", "report", str(run), "--out", str(target))
    assert out.returncode == 1 and out.stderr.strip() == f"error: {target}: is a file; the report goes into a folder"


def test_read_json_names_the_file_for_every_failure(tmp_path):
    from awarl.data.records import read_json

    path = tmp_path / "run.json"
    path.write_bytes(b'{"model": "caf\xe9"}')
    with pytest.raises(DataError, match=r"run.json: not UTF-8 text: byte b'\\xe9' at byte offset 14"):
        read_json(path)
    path.write_text('{"model": "x",}')
    with pytest.raises(DataError, match=r"run.json, line 1: broken JSON \(Expecting property name"):
        read_json(path)
    path.write_text('{"model": "x')  # the parser's message ends in "at" already: said once
    with pytest.raises(DataError, match=r"broken JSON \(Unterminated string starting at column 11\)$"):
        read_json(path)
    with pytest.raises(DataError, match=r": is a folder; expected a file"):
        read_json(tmp_path)


def test_cuda_device_on_a_cpu_only_torch_is_a_clear_error(tmp_path):
    """The device is checked before any weights load, so a bare checkpoint folder is enough."""
    import torch

    from awarl.llm.base import BackendError
    from awarl.llm.spec import load_backend

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the message is for CPU-only torch builds")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BackendError, match=r"device 'cuda': this torch \(.*\) has no CUDA support"):
        load_backend(str(tmp_path), device="cuda")
    with pytest.raises(BackendError, match=r"device 'cuda:1': this torch"):
        load_backend(str(tmp_path), device="cuda:1")
    with pytest.raises(BackendError, match=r"unknown device 'gpu0'"):
        load_backend(str(tmp_path), device="gpu0")


def test_exported_model_card_names_the_base_model_only_when_known(tiny_model_dir, tmp_path):
    from awarl.train.export import export_checkpoint

    ckpt = tmp_path / "grpo" / "checkpoint-3"
    ckpt.mkdir(parents=True)
    for f in tiny_model_dir.iterdir():
        (ckpt / f.name).write_bytes(f.read_bytes())
    (ckpt / "README.md").write_text("This model is a fine-tuned version of [None](https://huggingface.co/None).")
    export_checkpoint(ckpt, tmp_path / "plain")
    card = (tmp_path / "plain" / "README.md").read_text()
    assert "[None]" not in card and "fine-tuned version" not in card and "base_model:" not in card
    assert "<answer>not enough information</answer>" in card and "vllm serve plain" in card

    (tmp_path / "grpo" / "rollout.json").write_text('{"topk": 3}\n')
    (tmp_path / "grpo" / "awarl_recipe.yaml").write_text("model:\n  path: Qwen/Qwen2.5-7B-Instruct\n")
    export_checkpoint(ckpt, tmp_path / "named")
    card = (tmp_path / "named" / "README.md").read_text()
    assert "base_model: Qwen/Qwen2.5-7B-Instruct" in card
    assert ("fine-tuned version of [Qwen/Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct)"
            in card)
    assert (tmp_path / "named" / "rollout.json").read_text() == '{"topk": 3}\n'  # served under its own settings
    assert "`awarl_recipe.yaml`, `rollout.json`" in card


def test_no_command_shows_a_value_placeholder_on_a_flag():
    """Every command of the real entry point, walked in one subprocess: no flag reads `<bool>`."""
    script = (
        "import contextlib, io, typer\n"
        "from awarl.cli import app, main\n"
        "def paths(cmd, prefix=()):\n"
        "    yield prefix\n"
        "    for name, sub in (getattr(cmd, 'commands', None) or {}).items():\n"
        "        yield from paths(sub, prefix + (name,))\n"
        "bad, n = [], 0\n"
        "for path in paths(typer.main.get_command(app)):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):\n"
        "        main([*path, '--help'])\n"
        "    n += 1\n"
        "    if '<bool>' in buf.getvalue() or '--help' not in buf.getvalue():\n"
        "        bad.append(' '.join(path))\n"
        "print(n, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, bad = out.stdout.split(" ", 1)
    assert int(count) > 30 and bad.strip() == "[]", out.stdout


@pytest.mark.parametrize(
    "metrics,message",
    [
        ({"per_dataset": {"h": {"precision": "high"}}, "macro": {}},
         "per_dataset['h'], field 'precision': expected a number or null, got a string"),
        ({"per_dataset": {}, "macro": {"ra_f1": [1]}}, "macro, field 'ra_f1': expected a number or null, got a list"),
        ({"per_dataset": {}, "macro": {}, "settings": {"rollout": "closed"}},
         "field 'settings.rollout': expected an object, got a string"),
        ({"per_dataset": {}, "macro": {}, "recipe": 3}, "field 'recipe': expected an object, got a number"),
    ],
)
def test_report_names_damaged_metric_values(tmp_path, metrics, message):
    from awarl.eval.report import build_report

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(DataError) as info:
        build_report([run], tmp_path / "report")
    assert str(info.value) == f"{run / 'metrics.json'}, {message}"


# -- one error tree, caught once ----------------------------------------------------------------------------
def _raising_app(exc: Exception):
    """A root command like `awarl`'s (the same group class) whose only sub-command raises ``exc``."""
    import typer

    from awarl.cli import _Awarl

    app = typer.Typer(cls=_Awarl, add_completion=False)

    @app.command("boom")
    def boom() -> None:
        raise exc

    @app.command("other")
    def other() -> None:  # two commands, so `boom` stays a sub-command
        pass

    return app


@pytest.mark.parametrize("make,code", [
    (lambda: __import__("awarl.errors").errors.ConfigError("recipe.yaml: reward.gamma must be in (0, 1]"), 2),
    (lambda: DataError("records.jsonl", "line 3", "missing required field", "question"), 1),
    (lambda: __import__("awarl.errors").errors.SearchError("http://x: unreachable"), 1),
    (lambda: __import__("awarl.errors").errors.BackendError("openai:http://x#m: HTTP 503"), 1),
    (lambda: __import__("awarl.errors").errors.PolicyError("p.yaml", "rule r1", "unknown variable 'x'"), 2),
    (lambda: __import__("awarl.train.export").train.export.ExportError("ckpt: checkpoint folder not found"), 2),
    (lambda: __import__("awarl.verify.smt").verify.smt.SmtError("bad SMT-LIB: unbalanced ')'"), 2),
    (lambda: __import__("awarl.chat.config").chat.config.ChatConfigError("chat.yaml: unknown field(s) 'x'"), 2),
])
def test_every_awarl_error_ends_a_command_the_same_way(make, code):
    from typer.testing import CliRunner

    exc = make()
    result = CliRunner().invoke(_raising_app(exc), ["boom"])
    assert result.exit_code == code == exc.exit_code
    assert result.output.strip() == f"error: {exc}"


def test_the_old_error_names_are_the_one_tree():
    from awarl import errors
    from awarl.chat.config import ChatConfigError
    from awarl.config_fields import ConfigError
    from awarl.llm.base import BackendError
    from awarl.search.retriever import SearchError
    from awarl.verify.policy import PolicyError

    assert ChatConfigError is ConfigError is errors.ConfigError
    assert (BackendError, SearchError, PolicyError, DataError) == (errors.BackendError, errors.SearchError,
                                                                   errors.PolicyError, errors.DataError)


def test_a_bad_rollout_section_exits_2_from_training_and_evaluation_alike(tmp_path):
    """The same ConfigError leaves `train check` and `eval run` (through the generated rollout options) one way."""
    from typer.testing import CliRunner

    from awarl.cli import app

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {path: m}\ndata: {records: r.jsonl}\nrollout: {topk: 0}\n")
    runner = CliRunner()
    train = runner.invoke(app, ["train", "check", "--config", str(recipe)])
    evaluate = runner.invoke(app, ["eval", "run", "--config", str(recipe), "--model", "m", "--data", "d.jsonl",
                                   "--out", str(tmp_path / "o")])
    for result in (train, evaluate):
        assert result.exit_code == 2 and "topk must be >= 1, got 0" in result.output, result.output
        assert result.output.count("error:") == 1 and "Traceback" not in result.output


def test_train_grpo_reports_a_search_error_as_one_line(tiny_model_dir, hotpot_prepared, tmp_path):
    """The index named by the recipe is missing: `SearchError`, one line, exit 1 (not a traceback)."""
    from typer.testing import CliRunner

    from awarl.cli import app
    from awarl.data.records import write_jsonl

    records, _ = hotpot_prepared
    write_jsonl(tmp_path / "records.jsonl", [{**r.to_dict(), "p": 0.5} for r in records[:8]])
    sets = [f"model.path={tiny_model_dir}", "sft.enabled=false", f"data.records={tmp_path / 'records.jsonl'}",
            "data.capability=null", "data.corpus=null", f"data.index={tmp_path / 'no-index'}",
            f"output_dir={tmp_path / 'out'}", "logging.report_to=[none]", "grpo.report_to=[none]", "grpo.max_steps=1"]
    result = CliRunner().invoke(app, ["train", "grpo", "--config", "configs/tiny_cpu.yaml",
                                      *(x for s in sets for x in ("--set", s))])
    assert result.exit_code == 1, result.output
    assert f"error: {tmp_path / 'no-index'}: no such index folder" in " ".join(result.output.split())
    assert "Traceback" not in result.output


# -- bad input named by its file -------------------------------------------------------------------------------
def test_index_build_names_the_corpus_file(tmp_path):
    from typer.testing import CliRunner

    from awarl.cli import app

    runner = CliRunner()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = runner.invoke(app, ["index", "build", "--corpus", str(empty), "--out", str(tmp_path / "i1")])
    assert out.exit_code == 1 and f"error: {empty}: no passages: cannot index an empty corpus" in out.output
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join(json.dumps({"id": pid, "title": "", "text": f"river {n}"}) + "\n"
                           for n, pid in enumerate(["a", "b", "c", "b"])))
    out = runner.invoke(app, ["index", "build", "--corpus", str(dup), "--out", str(tmp_path / "i2")])
    assert out.exit_code == 1
    assert (f"error: {dup}, passage 4, field 'id': duplicate passage id 'b' (passages 2 and 4)"
            in " ".join(out.output.split()))
    assert not (tmp_path / "i2").exists()  # nothing half-built is left behind


def test_a_truncated_index_array_is_named(tmp_path):
    from typer.testing import CliRunner

    from awarl.cli import app

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{n}", "title": "", "text": f"river {n} delta"}) + "\n"
                              for n in range(20)))
    runner = CliRunner()
    assert runner.invoke(app, ["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "idx")]).exit_code == 0
    for name in ("bm25s/data.csc.index.npy", "passages.offsets.npy"):
        damaged = tmp_path / f"damaged-{name.split('/')[-1]}"
        subprocess.run(["cp", "-r", str(tmp_path / "idx"), str(damaged)], check=True)
        array = damaged / name
        array.write_bytes(array.read_bytes()[:-16])  # a copy cut short
        out = runner.invoke(app, ["search", "query", "--index", str(damaged), "river"])
        assert out.exit_code == 1 and "Traceback" not in out.output, out.output
        assert f"error: {array}: unreadable array" in " ".join(out.output.split())


@pytest.mark.parametrize("override,message", [
    ("model.path=no/such/model/here", "model.path 'no/such/model/here': no such folder"),
    ("grpo.max_steps=0", "grpo.max_steps must be >= 1 (or -1: num_train_epochs decides), got 0"),
    ("sft.args.max_steps=-3", "sft.args.max_steps must be >= 1 (or -1: num_train_epochs decides), got -3"),
])
def test_train_check_refuses_a_missing_model_and_no_steps(tiny_model_dir, override, message):
    from typer.testing import CliRunner

    from awarl.cli import app

    args = ["train", "check", "--config", "configs/tiny_cpu.yaml", "--set", f"model.path={tiny_model_dir}"]
    result = CliRunner().invoke(app, [*args, "--set", override])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert CliRunner().invoke(app, args).exit_code == 0  # the same recipe with the model present passes
