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
