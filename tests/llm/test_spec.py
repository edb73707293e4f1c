"""Spec strings choose a backend; bad specs and paths fail with messages that say what is wrong."""

from __future__ import annotations

import sys

import pytest

from awarl.llm.base import BackendError
from awarl.llm.spec import BackendSpec, load_backend, parse_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("/ckpt/step-100", BackendSpec("hf", "/ckpt/step-100")),
        ("hf:/ckpt", BackendSpec("hf", "/ckpt")),
        ("vllm:/ckpt", BackendSpec("vllm", "/ckpt")),
        ("openai:http://127.0.0.1:8000/v1#agent", BackendSpec("openai", "http://127.0.0.1:8000/v1", "agent")),
        ("https://api.example.com/v1", BackendSpec("openai", "https://api.example.com/v1", None)),
        ("Qwen/Qwen2.5-7B-Instruct", BackendSpec("hf", "Qwen/Qwen2.5-7B-Instruct")),
    ],
)
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty model spec"),
        ("tgi:/ckpt", "unknown backend 'tgi'"),
        ("vllm:", "names no model"),
        ("openai:127.0.0.1:8000", "expected openai:http"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(BackendError, match=message):
        parse_spec(spec)


def test_missing_model_path_is_named(tmp_path):
    with pytest.raises(BackendError, match=f"model path {tmp_path}/nope does not exist"):
        load_backend(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackendError, match="not a checkpoint directory"):
        load_backend(f"hf:{tmp_path / 'empty'}")


def test_unknown_option_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="unknown backend options \\['batchsize'\\]"):
        load_backend(str(tmp_path), batchsize=4)


def test_vllm_without_vllm_says_how_to_install(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(BackendError, match=r"pip install 'awarl\[vllm\]'"):
        load_backend(f"vllm:{tiny_model_dir}")
