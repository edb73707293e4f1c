"""``awarl demo``: watch AWA-RL work on a laptop CPU, end to end, on a synthetic world.

Stages, each resumable (a finished stage is skipped, GRPO continues from its last checkpoint,
p_i and evaluation from their last finished question):

1. ``world``   — `awarl.data.world`: a seeded fictional world, its MuSiQue-format splits read by
   the MuSiQue adapter (records + corpus), its verifier policy and policy tests;
2. ``model``   — a 2-layer Qwen2-shaped model and a tokenizer trained on the world's text (offline);
3. ``sft``     — warm start on gold two-search trajectories made with the real search tool;
4. ``p_i``     — capability of the SFT checkpoint: K sampled rollouts per question, on the RL split
   (the reward needs it) and on the held-out split (the calibration plot needs it);
5. ``grpo``    — TRL GRPO with the search tool and the AWA reward;
6. ``eval``    — greedy evaluation of the SFT ("before RL") and GRPO ("after RL") checkpoints on
   the held-out questions (persons never seen in SFT or RL);
7. ``report``  — ``report.md``, ``metrics.json`` and the plots.

Every stage runs under the recipe's one ``rollout:`` section (`RolloutSettings`), so p_i, training
and evaluation measure the same agent. The terminal shows one progress display; everything the
libraries print goes to ``demo.log``. ``demo.json`` is the manifest the chatbot reads.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from awarl.cli_errors import fail

DEFAULT_RECIPE = Path(__file__).resolve().parents[1] / "configs" / "demo_world.yaml"
MANIFEST = "demo.json"
STAGES = ("world", "model", "sft", "p_i", "grpo", "eval", "report")
DEMO_KEYS = ("world", "warm_start", "shape", "capability", "quick", "floors")


class DemoError(ValueError):
    """A demo that cannot run (bad recipe, a folder holding another demo); the message says what to do."""


# -- recipe --------------------------------------------------------------------------------------------------
@dataclass
class DemoRecipe:
    """The demo recipe: the world, the model shape, p_i's K, and a training recipe (TrainConfig)."""

    world: dict[str, Any]
    abstain_share: float  # warm_start.abstain_share: unanswerable SFT questions whose gold conversation abstains
    shape: dict[str, Any]
    k: int
    train: dict[str, Any]  # TrainConfig sections without paths (the demo fills them)
    floors: dict[str, float]
    source: str

    @classmethod
    def load(cls, path: str | Path, *, quick: bool = False, seed: int = 0,
             overrides: Sequence[str] = ()) -> "DemoRecipe":
        """Read a demo recipe; ``quick`` applies its ``quick:`` overrides, then ``overrides``
        (``section.field=value``, as ``awarl demo --set``) apply on top."""
        from awarl.train.config import apply_override, load_yaml

        path = Path(path)
        if not path.is_file():
            raise DemoError(f"{path}: demo recipe not found")
        raw = load_yaml(path.read_text(encoding="utf-8")) or {}
        if not isinstance(raw, dict):
            raise DemoError(f"{path}: the demo recipe must be a YAML mapping")
        if quick:
            quick_keys = raw.get("quick") or {}
            if not isinstance(quick_keys, dict):
                raise DemoError(f"{path}: 'quick' must map dotted keys to values (e.g. sft.args.max_steps: 400)")
            for key, value in quick_keys.items():
                apply_override(raw, f"{key}={json.dumps(value)}")
        for item in overrides:
            apply_override(raw, item)
        world = dict(raw.get("world") or {})
        world["seed"] = seed
        capability = raw.get("capability") or {}
        train = {k: copy.deepcopy(v) for k, v in raw.items() if k not in DEMO_KEYS}
        train["seed"] = seed
        floors = raw.get("floors") or {}
        floors = dict(floors.get("quick" if quick else "full") or {})
        warm = raw.get("warm_start") or {}
        unknown = sorted(set(warm) - {"abstain_share"}) if isinstance(warm, dict) else ["(not a mapping)"]
        if unknown:
            raise DemoError(f"{path}: warm_start: unknown key(s) {unknown}; known: ['abstain_share']")
        share = warm.get("abstain_share", 1.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            raise DemoError(f"{path}: warm_start.abstain_share must be a number in [0, 1], got {share!r}")
        return cls(world, float(share), dict(raw.get("shape") or {}), int(capability.get("k", 8)), train, floors,
                   str(path))


# -- paths ---------------------------------------------------------------------------------------------------
@dataclass
class DemoPaths:
    root: Path

    def __post_init__(self) -> None:
        r = self.root
        self.world, self.data, self.model = r / "world", r / "data", r / "model"
        self.sft, self.grpo, self.capability = r / "sft", r / "grpo", r / "capability"
        self.eval, self.report, self.log = r / "eval", r / "report", r / "demo.log"
        self.corpus = self.data / "corpus.jsonl"
        self.trajectories = self.data / "sft_trajectories.jsonl"
        self.grpo_metrics = self.grpo / "metrics_log.jsonl"
        self.timings = r / "timings.json"
        self.settings = r / "recipe.json"

    def records(self, split: str) -> Path:
        return self.data / split / "records.jsonl"

    def p_file(self, split: str) -> Path:
        return self.capability / f"{split}.jsonl"


# -- display -------------------------------------------------------------------------------------------------
class Display:
    """One rich progress display for all stages: an overall bar and the current stage's bar with
    its latest numbers. Messages (warnings, stage results) print above it."""

    def __init__(self, terminal: Any, enabled: bool = True):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(file=terminal, highlight=False, soft_wrap=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 console=self.console, disable=not enabled, refresh_per_second=2)
        self.overall = self.progress.add_task("[bold]demo[/bold]", total=len(STAGES), info="")
        self.stage: Any = None

    def __enter__(self) -> "Display":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, name: str, total: int | None, info: str = "") -> None:
        if self.stage is not None:
            self.progress.remove_task(self.stage)
        self.stage = self.progress.add_task(f"  {name}", total=total, info=info)

    def update(self, completed: int | None = None, total: int | None = None, info: str | None = None) -> None:
        if self.stage is None:
            return
        kwargs: dict[str, Any] = {}
        if completed is not None:
            kwargs["completed"] = completed
        if total is not None:
            kwargs["total"] = total
        if info is not None:
            kwargs["info"] = info
        self.progress.update(self.stage, **kwargs)

    def done(self, message: str) -> None:
        self.progress.advance(self.overall)
        self.console.print(f"[green]✓[/green] {message}")

    def warn(self, message: str) -> None:
        self.console.print(f"[bold yellow]WARNING[/bold yellow] {message}")

    def print(self, message: str) -> None:
        self.console.print(message)


@contextmanager
def follow_lines(path: Path, display: Display, total: int, every: float = 1.0) -> Iterator[None]:
    """Move the stage bar with the line count of a JSONL file another stage appends to."""
    stop = threading.Event()

    def count() -> int:
        try:
            with path.open("rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def loop() -> None:
        while not stop.wait(every):
            display.update(completed=min(count(), total))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        display.update(completed=min(count(), total))


# -- the demo ------------------------------------------------------------------------------------------------
@dataclass
class Demo:
    """State shared by the stages."""

    paths: DemoPaths
    recipe: DemoRecipe
    display: Display
    quick: bool
    seed: int
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    # ---- settings ----
    @property
    def rollout(self):
        from awarl.agent.settings import RolloutSettings

        return RolloutSettings.from_dict(self.recipe.train.get("rollout") or {}, f"{self.recipe.source}: rollout")

    def train_config(self, records: str = "rl"):
        """The training recipe with the demo's paths filled in (SFT then GRPO from SFT's output);
        ``records`` is the split trained on (sft for the SFT stage, rl for GRPO)."""
        from awarl.train.config import TrainConfig

        raw = copy.deepcopy(self.recipe.train)
        p = self.paths
        raw["output_dir"] = str(p.grpo)
        raw["model"] = {**(raw.get("model") or {}), "path": str(p.sft / "final")}
        raw["data"] = {**(raw.get("data") or {}), "records": str(p.records(records)), "corpus": str(p.corpus),
                       "capability": str(p.p_file("rl"))}
        sft = raw.setdefault("sft", {})
        sft.update({"init_from": str(p.model), "output_dir": str(p.sft), "source": "trajectories",
                    "trajectories": str(p.trajectories)})
        return TrainConfig.from_dict(raw, source=self.recipe.source)

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        self.display.warn(message)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.timings[stage] = round(self.timings.get(stage, 0.0) + time.perf_counter() - t0, 1)
        self.paths.timings.write_text(json.dumps(self.timings, indent=1) + "\n", encoding="utf-8")

    # ---- stages ----
    def world_stage(self) -> Any:
        from awarl.data.adapters import load_dataset_file
        from awarl.data.records import write_jsonl
        from awarl.data.world import SPLITS, WorldConfig, generate_world, write_world

        cfg = WorldConfig.from_dict(self.recipe.world, f"{self.recipe.source}: world")
        world = generate_world(cfg)
        marker = self.paths.world / "world.json"
        if marker.exists():
            before = json.loads(marker.read_text(encoding="utf-8")).get("config")
            if before != cfg.to_dict():
                raise DemoError(f"{self.paths.root} holds a demo of another world ({before} vs {cfg.to_dict()}); "
                                "use another --out, or delete the folder to start over")
            if all(self.paths.records(s).exists() for s in SPLITS) and self.paths.corpus.exists():
                self.display.done(f"world: reused ({_world_line(world)})")
                return world
        self.display.start("world", None, "generating")
        files = write_world(world, self.paths.world)
        for split in SPLITS:
            records, _ = load_dataset_file("musique", files[split])  # the official adapter, unchanged
            write_jsonl(self.paths.records(split), (r.to_dict() for r in records))
        shutil.copyfile(files["corpus"], self.paths.corpus)
        self.display.done(f"world: {_world_line(world)} -> {self.paths.world}")
        return world

    def model_stage(self, world: Any) -> None:
        from awarl.train.tiny import TinyShape, WORLD_SHAPE, build_world_model

        if (self.paths.model / "config.json").exists():
            self.display.done("model: reused")
            return
        self.display.start("model", None, "tokenizer + random model")
        shape = TinyShape(**{**WORLD_SHAPE.__dict__, **self.recipe.shape})
        tmp = self.paths.model.with_name("model.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build_world_model(tmp, world, shape, seed=self.seed, system_prompt=self.rollout.system_prompt)
        tmp.rename(self.paths.model)
        params = _count_params(self.paths.model)
        self.display.done(f"model: {shape.num_hidden_layers} layers x {shape.hidden_size} hidden, "
                          f"{params / 1e6:.2f} M parameters, offline tokenizer")

    def sft_stage(self, world: Any) -> None:
        from awarl.agent.env import search_env_factory
        from awarl.data.records import write_jsonl
        from awarl.search.bm25 import BM25Index
        from awarl.train import sft
        from awarl.train.tiny import world_trajectories

        final = self.paths.sft / "final"
        if (final / "config.json").exists():
            self.display.done("sft: reused")
            return
        config = self.train_config("sft")
        rollout = config.rollout
        env = search_env_factory(BM25Index.build(world.passages), rollout)
        write_jsonl(self.paths.trajectories, world_trajectories(world, env, ("sft",), rollout.system_prompt,
                                                                abstain_share=self.recipe.abstain_share))
        if self.recipe.abstain_share < 1.0 and "wrong" not in config.sft.keep_outcomes:
            config.sft.keep_outcomes = [*config.sft.keep_outcomes, "wrong"]  # the guesses are wrong on purpose
        steps = int(config.sft.args.get("max_steps", 0))
        self.display.start("sft", steps, "")
        losses: list[float] = []

        def on_line(line: str) -> None:
            print(line, flush=True)  # stdout is demo.log here
            fields = _summary_fields(line)
            if "step" in fields:
                if "loss" in fields:
                    losses.append(fields["loss"])
                self.display.update(completed=int(fields["step"]), info=f"loss {fields.get('loss', float('nan')):.3f}")

        with self.timed("sft"):
            sft.main(config, on_log=on_line)
        self.display.done(f"sft: {steps} steps on {len(world.split('sft'))} gold trajectories, final loss "
                          f"{losses[-1] if losses else float('nan'):.3f}")

    def capability_stage(self) -> None:
        from awarl.capability import CapabilityConfig, estimate
        from awarl.data.records import load_records

        for split in ("rl", "eval"):
            n = len(load_records(self.paths.records(split)))
            out = self.paths.p_file(split)
            self.display.start(f"p_i ({split})", n, f"K={self.recipe.k} at T=1")
            config = CapabilityConfig(model=str(self.paths.sft / "final"), data=self.paths.records(split), out=out,
                                      rollout=self.rollout, k=self.recipe.k, temperature=1.0, corpus=self.paths.corpus,
                                      seed=self.seed, backend_options={"device": "cpu"})
            with self.timed("p_i"), follow_lines(out, self.display, n):
                estimate(config, progress=False)
            stats = capability_summary(out)
            self.display.print(f"  p_i ({split}): mean {stats['mean_p']:.2f} over {stats['n']} questions, "
                               f"answerable {stats['mean_p_answerable']:.2f}; unparsable {stats['unparsable_share']:.0%} "
                               f"of rollouts")
            for message in capability_warnings(stats, split):
                self.warn(message)
        self.display.done("p_i: estimated on the RL and held-out splits")

    def grpo_stage(self) -> None:
        from awarl.train import grpo
        from awarl.train.callbacks import MetricsLog

        final = self.paths.grpo / "final"
        if (final / "config.json").exists():
            self.display.done("grpo: reused")
            return
        config = self.train_config()
        steps = int(config.grpo.get("max_steps", 0))
        resume = "latest" if any(self.paths.grpo.glob("checkpoint-*/trainer_state.json")) else None
        self.display.start("grpo", steps, "resuming" if resume else "")

        def on_log(step: int, total: int, row: dict[str, Any]) -> None:
            info = " ".join(f"{label} {row[key]:.2f}" for key, label in (
                ("awa/refusal_rate", "refuse"), ("awa/expected_refusal_rate", "exp"), ("awa/penalty", "P"),
                ("awa/accuracy", "acc")) if isinstance(row.get(key), (int, float)))
            self.display.update(completed=step, info=info)

        with self.timed("grpo"):
            grpo.main(config, resume=resume, extra_callbacks=[MetricsLog(self.paths.grpo_metrics, on_log)])
        self.display.done(f"grpo: {steps} steps ({_generation_batches(config)} generation batches of "
                          f"{_prompts_per_batch(config)} prompts x {config.grpo.get('num_generations')})")

    def eval_stage(self) -> dict[str, Any]:
        from awarl.eval.run import EvalConfig, run_eval

        data = self._eval_records_with_p()
        n = sum(1 for _ in data.open(encoding="utf-8"))
        results = {}
        for name, label in (("sft", "before RL"), ("grpo", "after RL")):
            out = self.paths.eval / name
            self.display.start(f"eval ({label})", n, "greedy")
            config = EvalConfig(model=str(getattr(self.paths, name) / "final"), data=data, out=out, name=label,
                                rollout=self.rollout, corpus=self.paths.corpus, temperature=0.0, seed=self.seed,
                                backend_options={"device": "cpu"})
            with self.timed("eval"), follow_lines(out / "trajectories.jsonl", self.display, n):
                result = run_eval(config, progress=False)
            results[name] = result.metrics
            o = result.metrics["overall"]
            self.display.print(f"  {label}: precision {o['precision']:.2f}, accuracy {o['accuracy']:.2f}, "
                               f"RA-F1 {o['ra_f1']:.2f}, refusal {o['refusal_rate']:.2f}")
            unparsable = o.get("no_parsable_answer", 0) / max(o["n"], 1)
            if unparsable > 0.5:
                self.warn(f"{label}: {unparsable:.0%} of held-out replies have no parsable <answer>; the checkpoint "
                          f"did not learn the protocol. Raise sft.args.max_steps in the recipe, or check "
                          f"rollout.max_completion_tokens (see {self.paths.log}).")
        self.display.done("eval: before and after RL on held-out questions")
        return results

    def _eval_records_with_p(self) -> Path:
        """Held-out records with the SFT checkpoint's p_i in ``meta.p`` (the calibration plot bins by it)."""
        from awarl.data.records import iter_jsonl, load_records, write_jsonl

        p = {row["id"]: row["p"] for _, row in iter_jsonl(self.paths.p_file("eval"))}
        out = self.paths.data / "eval" / "records_with_p.jsonl"
        rows = []
        for r in load_records(self.paths.records("eval")):
            r.meta["p"] = p.get(r.id)
            rows.append(r.to_dict())
        write_jsonl(out, rows)
        return out

    def write_manifest(self) -> Path:
        """``demo.json``: where the chatbot finds the world, corpus, policy and agents (paths relative)."""
        p = self.paths

        def rel(path: Path, needs: str = "config.json") -> str | None:
            return str(path.relative_to(p.root)) if (path / needs).exists() else None

        manifest = {
            "version": 1,
            "world": "world",
            "corpus": str(p.corpus.relative_to(p.root)),
            "policy": "world/policy.yaml",
            "policy_tests": "world/policy.tests.yaml",
            "agent": rel(p.grpo / "final"),
            "sft_agent": rel(p.sft / "final"),
            "rollout": self.rollout.to_dict(),
        }
        path = p.root / MANIFEST
        path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return path


def _settings(recipe: DemoRecipe) -> dict[str, Any]:
    """What a demo folder's stages were made with, flattened to dotted keys (floors only grade
    the report, so they may change between runs)."""
    def flat(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
        if isinstance(value, dict):
            for key, item in value.items():
                flat(f"{prefix}.{key}" if prefix else str(key), item, out)
        else:
            out[prefix] = value
        return out

    raw = {"world": recipe.world, "warm_start": {"abstain_share": recipe.abstain_share}, "shape": recipe.shape,
           "capability": {"k": recipe.k}, **recipe.train}
    return json.loads(json.dumps(flat("", raw, {}), default=str))


def check_settings(marker: Path, recipe: DemoRecipe) -> None:
    """A folder of finished stages (a demo, a fidelity study) is resumed only with the settings
    it was started with, recorded in ``marker``: its stages would otherwise be reused under a
    recipe that did not make them. Refused, naming the changed fields."""
    now = _settings(recipe)
    if marker.exists():
        before = json.loads(marker.read_text(encoding="utf-8"))
        changed = sorted(k for k in set(before) | set(now) if before.get(k, "<unset>") != now.get(k, "<unset>"))
        if changed:
            shown = ", ".join(f"{k}: {before.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r}" for k in changed[:6])
            more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
            raise DemoError(f"{marker.parent} was started with other settings ({shown}{more}); use another --out, "
                            "or delete the folder to start over")
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def run_demo(out: Path, *, quick: bool = False, seed: int = 0, recipe: Path = DEFAULT_RECIPE,
             progress: bool = True, until: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run (or resume) every stage; returns the report's metrics. ``until`` stops after a stage;
    ``overrides`` (``section.field=value``) change the recipe."""
    import logging
    import os
    import warnings

    from awarl.train.callbacks import quiet_terminal

    if until is not None and until not in STAGES:
        raise DemoError(f"--until must be one of {', '.join(STAGES)}, got {until!r}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    loaded = DemoRecipe.load(recipe, quick=quick, seed=seed, overrides=overrides)
    paths = DemoPaths(Path(out))
    paths.root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with quiet_terminal(paths.log) as terminal, Display(terminal, enabled=progress) as display:
        logging.captureWarnings(True)
        warnings.simplefilter("default")
        demo = Demo(paths, loaded, display, quick, seed)
        if paths.timings.exists():
            demo.timings = json.loads(paths.timings.read_text(encoding="utf-8"))
        display.print(f"[bold]awarl demo[/bold] -> {paths.root} ({'quick' if quick else 'full'}, seed {seed}); "
                      f"library output goes to {paths.log}")
        demo.train_config()  # fail on a bad recipe before any work
        check_settings(paths.settings, loaded)
        with demo.timed("world"):
            world = demo.world_stage()
        demo.write_manifest()
        stop = (lambda s: until == s)
        if not stop("world"):
            with demo.timed("model"):
                demo.model_stage(world)
        if not any(stop(s) for s in ("world", "model")):
            demo.sft_stage(world)
            demo.write_manifest()
        if until in ("world", "model", "sft"):
            return {}
        demo.capability_stage()
        if stop("p_i"):
            return {}
        demo.grpo_stage()
        demo.write_manifest()
        if stop("grpo"):
            return {}
        results = demo.eval_stage()
        demo.timings["total_this_run"] = round(time.perf_counter() - t0, 1)
        metrics = build_report(demo, world, results)
        display.done(f"report: {paths.report / 'report.md'}")
        for line in metrics["headline"]:
            display.print(line)
        return metrics


# -- report --------------------------------------------------------------------------------------------------
COLUMNS = {
    "precision": "correct / answered: how often an answer the agent gives is right (abstentions excluded)",
    "accuracy": "correct / all questions",
    "RA-F1": "harmonic mean of precision and accuracy, 2PA / (P + A)",
    "refusal": "abstained / all questions",
    "abstain-recall": "share of UNANSWERABLE questions the agent abstained on (higher is better)",
    "over-refusal": "share of ANSWERABLE questions the agent abstained on (lower is better)",
    "acc. answerable": "correct / answerable questions",
    "expected refusal": "share of questions where refusing is the better bet under the AWA reward: "
                        "R_base(p) = 1 - max(p, p_clip)^gamma > p (p = the SFT checkpoint's p_i)",
}


def outcome_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per-question rows of an evaluation run: outcome, answerable, p."""
    from awarl.data.records import iter_jsonl

    return [row for _, row in iter_jsonl(run_dir / "trajectories.jsonl")]


def run_summary(metrics: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    o = metrics["overall"]
    answerable = [r for r in rows if r.get("answerable", True)]
    return {
        "n": o["n"], "precision": o["precision"], "accuracy": o["accuracy"], "ra_f1": o["ra_f1"],
        "refusal_rate": o["refusal_rate"], "abstain_recall": o.get("abstain_recall"),
        "over_refusal": o.get("over_refusal"),
        "accuracy_answerable": sum(r["outcome"] == "correct" for r in answerable) / len(answerable) if answerable else 0.0,
        "unparsable": sum(r.get("answer") is None for r in rows) / max(len(rows), 1),
        "searches_per_question": o.get("searches_per_question"),
    }


def refusal_by_p(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Refusal share per p_i VALUE (K samples give K + 1 values; deciles would merge them)."""
    bins: dict[float, list[bool]] = {}
    for r in rows:
        if isinstance(r.get("p"), (int, float)):
            bins.setdefault(round(float(r["p"]), 4), []).append(bool(r.get("abstained")))
    return [{"p": p, "n": len(v), "refusal": sum(v) / len(v)} for p, v in sorted(bins.items())]


def expected_refusal(rows: list[dict[str, Any]], reward: Any) -> float | None:
    from awarl.rewards.refusal import expected_refusal_rate

    ps = [float(r["p"]) for r in rows if isinstance(r.get("p"), (int, float))]
    if not ps or reward.kind != "awa":
        return None
    return expected_refusal_rate(ps, reward.p_clip, reward.gamma, reward.r_correct, reward.r_wrong)


def build_report(demo: Demo, world: Any, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """metrics.json, report.md and the plots, from the run folders (so a rerun rebuilds them)."""
    from awarl.train.callbacks import read_metrics_log

    p = demo.paths
    p.report.mkdir(parents=True, exist_ok=True)
    config = demo.train_config()
    rows = {name: outcome_rows(p.eval / name) for name in ("sft", "grpo")}
    runs = {name: run_summary(results[name], rows[name]) for name in ("sft", "grpo")}
    expected = expected_refusal(rows["sft"], config.reward)
    steps = read_metrics_log(p.grpo_metrics)
    floors = demo.recipe.floors
    checks = {}
    if "sft_accuracy_answerable" in floors:
        value = runs["sft"]["accuracy_answerable"]
        checks["sft_accuracy_answerable"] = {"value": value, "floor": floors["sft_accuracy_answerable"],
                                             "passed": value >= floors["sft_accuracy_answerable"]}
    if "refusal_gap" in floors and expected is not None:
        gap = abs(runs["grpo"]["refusal_rate"] - expected)
        checks["refusal_gap"] = {"value": gap, "floor": floors["refusal_gap"], "passed": gap <= floors["refusal_gap"],
                                 "refusal_after": runs["grpo"]["refusal_rate"], "expected": expected}
    for name, check in checks.items():
        if not check["passed"]:
            demo.warn(f"quality floor missed: {name} = {check['value']:.3f} (floor {check['floor']}); see report.md")
    metrics = {
        "mode": "quick" if demo.quick else "full", "seed": demo.seed, "world": world.stats(),
        "warm_start_abstain_share": demo.recipe.abstain_share,
        "rollout": config.rollout.to_dict(), "reward": {k: getattr(config.reward, k) for k in (
            "kind", "gamma", "p_clip", "beta", "tau", "delta", "max_penalty", "cap_abstain")},
        "capability": {split: capability_summary(p.p_file(split)) for split in ("rl", "eval")},
        "before_rl": runs["sft"], "after_rl": runs["grpo"], "expected_refusal": expected,
        "refusal_by_p": {"before_rl": refusal_by_p(rows["sft"]), "after_rl": refusal_by_p(rows["grpo"])},
        "grpo_steps": len(steps), "grpo_last": _last_window(steps), "checks": checks,
        "timings_s": demo.timings, "warnings": demo.warnings,
    }
    plots = {
        "refusal": plot_refusal(steps, p.report / "refusal_vs_step.png"),
        "rewards": plot_rewards(steps, p.report / "reward_terms.png"),
        "before_after": plot_before_after(runs, expected, p.report / "before_after.png"),
        "calibration": plot_calibration(metrics["refusal_by_p"], config.reward, p.report / "refusal_by_p.png"),
    }
    metrics["plots"] = {k: str(v.relative_to(p.root)) for k, v in plots.items() if v is not None}
    _check_finite(metrics)
    (p.root / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    (p.report / "report.md").write_text(report_markdown(metrics, demo), encoding="utf-8")
    metrics["headline"] = headline(metrics)
    return metrics


def _last_window(steps: list[dict[str, Any]], n: int = 10) -> dict[str, float]:
    keys = ("awa/refusal_rate", "awa/expected_refusal_rate", "awa/penalty", "awa/accuracy", "awa/precision", "reward")
    out = {}
    for key in keys:
        values = [s[key] for s in steps[-n:] if isinstance(s.get(key), (int, float))]
        if values:
            out[key] = sum(values) / len(values)
    return out


def _check_finite(value: Any, where: str = "metrics") -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}: a stage produced a non-finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}")
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")


def headline(m: dict[str, Any]) -> list[str]:
    b, a = m["before_rl"], m["after_rl"]
    exp = m["expected_refusal"]
    lines = [f"  held-out ({b['n']} questions)      before RL   after RL",
             *(f"  {label:<28} {b[key]:>9.2f} {a[key]:>10.2f}" for key, label in (
                 ("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1"),
                 ("refusal_rate", "refusal rate"), ("abstain_recall", "abstain-recall (unanswerable)"),
                 ("over_refusal", "over-refusal (answerable)")) if b.get(key) is not None and a.get(key) is not None)]
    if exp is not None:
        lines.append(f"  expected refusal rate (AWA, from p_i): {exp:.2f}")
    return lines


def report_markdown(m: dict[str, Any], demo: Demo) -> str:
    b, a = m["before_rl"], m["after_rl"]
    cap = m["capability"]
    rows = [("precision", "precision"), ("accuracy", "accuracy"), ("RA-F1", "ra_f1"), ("refusal", "refusal_rate"),
            ("abstain-recall", "abstain_recall"), ("over-refusal", "over_refusal"),
            ("acc. answerable", "accuracy_answerable")]
    fmt = (lambda v: "–" if v is None else f"{v:.3f}")
    table = ["| run | " + " | ".join(label for label, _ in rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for label, r in (("before RL (SFT checkpoint)", b), ("after RL (GRPO, AWA reward)", a)):
        table.append(f"| {label} | " + " | ".join(fmt(r.get(key)) for _, key in rows) + " |")
    last = m["grpo_last"]
    lines = [
        f"# awarl demo report ({m['mode']}, seed {m['seed']})", "",
        "AWA-RL on a synthetic world, trained and evaluated on this machine's CPU. Held-out questions are about "
        "persons never seen in SFT or RL; "
        f"{m['world']['eval']['unanswerable']} of {m['world']['eval']['questions']} cannot be answered from the "
        "corpus (the city's country passage is absent), so abstaining is right there. The SFT warm start saw "
        "gold two-search conversations of other persons; on "
        f"{1 - m.get('warm_start_abstain_share', 1.0):.0%} of its unanswerable ones the gold reply guesses from an "
        "irrelevant passage instead of abstaining (`warm_start.abstain_share` in the recipe), as instruction data "
        "that never says \"I don't know\" would teach.", "",
        "## Held-out evaluation (greedy)", "", *table, "",
        f"Expected refusal rate under the AWA reward (gamma {m['reward']['gamma']}, p_clip {m['reward']['p_clip']}), "
        f"from the SFT checkpoint's p_i on these questions: **{fmt(m['expected_refusal'])}**.", "",
        "What each column means:", "",
        *(f"- **{k}**: {v}" for k, v in COLUMNS.items()), "",
        "## Capability p_i of the SFT checkpoint", "",
        f"K = {cap['rl']['k']} sampled rollouts per question at temperature 1, same rollout settings as training "
        "and evaluation.", "",
        "| split | questions | mean p | mean p (answerable) | unparsable rollouts | p histogram (value: count) |",
        "|---|---|---|---|---|---|",
        *(f"| {s} | {c['n']} | {c['mean_p']:.3f} | {c['mean_p_answerable']:.3f} | {c['unparsable_share']:.1%} | "
          + ", ".join(f"{k}: {v}" for k, v in c["histogram"].items()) + " |" for s, c in cap.items()), "",
        "## GRPO", "",
        f"{m['grpo_steps']} logged optimizer steps. Mean of the last 10: "
        + ", ".join(f"{k} {v:.3f}" for k, v in last.items()) + ".", "",
        "The **penalty P_t** is the AWA reward's dynamic correction, subtracted from the abstain reward: it turns "
        "positive when the batch refuses more than the expected rate and negative when it refuses less. It is not "
        "precision (correct / answered), which is an evaluation metric.", "",
        "![refusal rate vs step](refusal_vs_step.png)", "", "![reward terms](reward_terms.png)", "",
        "![before vs after](before_after.png)", "", "![refusal by p_i](refusal_by_p.png)", "",
        "## Quality checks", "",
        *(f"- {name}: {c['value']:.3f} (floor {c['floor']}) — {'passed' if c['passed'] else '**missed**'}"
          for name, c in m["checks"].items()), "",
        "## Time (seconds, this machine)", "", *(f"- {k}: {v}" for k, v in m["timings_s"].items()), "",
    ]
    if m["warnings"]:
        lines += ["## Warnings", "", *(f"- {w}" for w in m["warnings"]), ""]
    return "\n".join(lines)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(s["step"], float(s[key])) for s in steps if isinstance(s.get(key), (int, float))]
    return [x for x, _ in pts], [y for _, y in pts]


def _smooth(ys: list[float], w: int = 5) -> list[float]:
    return [sum(ys[max(0, i - w + 1): i + 1]) / len(ys[max(0, i - w + 1): i + 1]) for i in range(len(ys))]


def plot_refusal(steps: list[dict[str, Any]], path: Path) -> Path | None:
    """Batch refusal rate beside the expected rate, and the penalty P_t on its own axis."""
    if not steps:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x, y = _series(steps, "awa/refusal_rate")
    ax.plot(x, y, color="tab:blue", alpha=0.3, lw=1)
    ax.plot(x, _smooth(y), color="tab:blue", lw=2, label="observed refusal rate (batch, 5-step mean)")
    x, y = _series(steps, "awa/expected_refusal_rate")
    ax.plot(x, _smooth(y), color="tab:green", lw=2, ls="--", label="expected refusal rate (from p_i)")
    ax.set_xlabel("GRPO optimizer step")
    ax.set_ylabel("share of rollouts")
    ax.set_ylim(0, 1)
    ax2 = ax.twinx()
    x, y = _series(steps, "awa/penalty")
    ax2.plot(x, y, color="tab:red", lw=1.5, label="penalty P_t (right axis)")
    ax2.axhline(0, color="tab:red", lw=0.5, ls=":")
    ax2.set_ylabel("penalty P_t")
    lim = max([abs(v) for v in y] + [0.2]) * 1.2
    ax2.set_ylim(-lim, lim)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
    ax.set_title("GRPO with the AWA reward: batch refusal rate, its expected rate, and the penalty P_t")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_rewards(steps: list[dict[str, Any]], path: Path) -> Path | None:
    """Every reward function's mean per step, the total, and the batch accuracy."""
    if not steps:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    keys = sorted({k for s in steps for k in s if k.startswith("rewards/") and k.endswith("/mean")})
    for key in ["reward", *keys]:
        x, y = _series(steps, key)
        if x:
            ax.plot(x, _smooth(y), lw=2 if key == "reward" else 1.2,
                    label="total reward" if key == "reward" else key.split("/")[1] + " (mean)")
    for key, label in (("awa/accuracy", "batch accuracy"), ("awa/precision", "batch precision")):
        x, y = _series(steps, key)
        if x:
            ax.plot(x, _smooth(y), lw=1, ls=":", label=label)
    ax.set_xlabel("GRPO optimizer step")
    ax.set_ylabel("mean over the batch (5-step mean)")
    ax.legend(fontsize=8)
    ax.set_title("Reward terms during GRPO")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_before_after(runs: dict[str, dict[str, Any]], expected: float | None, path: Path) -> Path:
    plt = _plt()
    keys = [("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1"), ("refusal_rate", "refusal"),
            ("abstain_recall", "abstain-recall\n(unanswerable)"), ("over_refusal", "over-refusal\n(answerable)")]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.38
    for j, (name, label, color) in enumerate((("sft", "before RL (SFT)", "tab:gray"), ("grpo", "after RL (GRPO, AWA)", "tab:blue"))):
        vals = [runs[name].get(k) or 0.0 for k, _ in keys]
        xs = [i + (j - 0.5) * width for i in range(len(keys))]
        bars = ax.bar(xs, vals, width, label=label, color=color)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", fontsize=7)
    if expected is not None:
        i = [k for k, _ in keys].index("refusal_rate")
        ax.plot([i - 0.45, i + 0.45], [expected, expected], color="tab:green", ls="--", lw=2,
                label=f"expected refusal ({expected:.2f})")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([label for _, label in keys], fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.legend(fontsize=8)
    ax.set_title("Held-out questions: before vs after RL (greedy)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_calibration(by_p: dict[str, list[dict[str, Any]]], reward: Any, path: Path) -> Path | None:
    """Refusal share by p_i value, before and after RL, beside where refusing is the better bet."""
    if not any(by_p.values()):
        return None
    from awarl.rewards.refusal import refusal_preferred

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, label, color, marker in (("before_rl", "before RL (SFT)", "tab:gray", "o"),
                                       ("after_rl", "after RL (GRPO, AWA)", "tab:blue", "s")):
        pts = by_p[name]
        if pts:
            ax.plot([q["p"] for q in pts], [q["refusal"] for q in pts], marker=marker, color=color, label=label)
    ps = sorted({q["p"] for pts in by_p.values() for q in pts})
    if reward.kind == "awa" and ps:
        pref = refusal_preferred(ps, reward.p_clip, reward.gamma, reward.r_correct, reward.r_wrong)
        ax.step(ps, [float(v) for v in pref], where="mid", color="tab:green", ls="--",
                label=f"refusing is the better bet (gamma {reward.gamma})")
    for q in by_p["before_rl"]:
        ax.annotate(f"n={q['n']}", (q["p"], -0.06), ha="center", fontsize=7, color="dimgray")
    ax.set_xlabel("p_i of the SFT checkpoint (share of K sampled rollouts correct)")
    ax.set_ylabel("refusal share on held-out questions")
    ax.set_ylim(-0.1, 1.05)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
    ax.set_title("Refusal by capability p_i (binned by value; n = held-out questions per value)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- small helpers -------------------------------------------------------------------------------------------
def _world_line(world: Any) -> str:
    s = world.stats()
    return (f"{s['persons']} persons, {s['passages']} passages, {s['questions']} questions "
            f"(SFT {s['sft']['questions']} / RL {s['rl']['questions']} / held-out {s['eval']['questions']}; "
            f"{s['eval']['unanswerable_share']:.0%} of held-out unanswerable)")


def _count_params(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    h, i, n, v = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    return v * h + n * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + h


def _summary_fields(line: str) -> dict[str, float]:
    """Numbers of a `awarl.train.callbacks.summary_line` ("step 3/10 | loss 0.5 | …")."""
    out: dict[str, float] = {}
    for part in line.split("|"):
        words = part.split()
        if len(words) >= 2:
            key, value = words[-2], words[-1].split("/")[0]
            try:
                out[key] = float(value)
            except ValueError:
                continue
    return out


def _generation_batches(config: Any) -> int:
    g = config.grpo
    per_gen = int(g.get("steps_per_generation") or g.get("gradient_accumulation_steps", 1))
    return math.ceil(int(g.get("max_steps", 0)) * int(g.get("gradient_accumulation_steps", 1)) / per_gen)


def _prompts_per_batch(config: Any) -> int:
    g = config.grpo
    per_gen = int(g.get("steps_per_generation") or g.get("gradient_accumulation_steps", 1))
    return int(g.get("per_device_train_batch_size", 8)) * per_gen // int(g.get("num_generations", 8))


def capability_summary(path: Path) -> dict[str, Any]:
    """p_i statistics of a capability file: mean p, the histogram by value, unparsable share."""
    from awarl.data.records import iter_jsonl

    rows = [row for _, row in iter_jsonl(path)]
    n = len(rows)
    k = max((row.get("capability", {}).get("k", 0) for row in rows), default=0)
    hist: dict[str, int] = {}
    for row in rows:
        hist[f"{row['p']:.3f}"] = hist.get(f"{row['p']:.3f}", 0) + 1
    answerable = [row["p"] for row in rows if row.get("answerable", True)]
    rollouts = sum(row.get("capability", {}).get("k", 0) for row in rows) or 1
    return {
        "n": n, "k": k,
        "mean_p": sum(row["p"] for row in rows) / n if n else 0.0,
        "mean_p_answerable": sum(answerable) / len(answerable) if answerable else 0.0,
        "all_zero": n > 0 and all(row["p"] == 0 for row in rows),
        "histogram": dict(sorted(hist.items(), key=lambda kv: float(kv[0]))),
        "unparsable_share": sum(row.get("capability", {}).get("unparsable", 0) for row in rows) / rollouts,
        "abstain_share": sum(row.get("capability", {}).get("abstain", 0) for row in rows) / rollouts,
    }


def capability_warnings(stats: dict[str, Any], split: str) -> list[str]:
    """Loud warnings for a degenerate p_i stage, each with what to do."""
    out = []
    if stats["all_zero"]:
        out.append(f"p_i ({split}): every p_i is 0, so the AWA reward sees a model that can never answer and will "
                   "push it to refuse everything. The SFT checkpoint is too weak under sampling at T=1: raise "
                   "sft.args.max_steps (the world model needs ~800+ steps) and rerun with a new --out.")
    if stats["unparsable_share"] > 0.5:
        out.append(f"p_i ({split}): {stats['unparsable_share']:.0%} of rollouts have no parsable <answer>; check "
                   "rollout.max_completion_tokens (tool results count against it) and the SFT stage's loss.")
    return out


# -- command -------------------------------------------------------------------------------------------------
def demo_command(
    out: Path = typer.Option(None, "--out", help="Demo folder; rerunning resumes it.",
                             show_default="runs/demo, or runs/demo-quick with --quick"),
    quick: bool = typer.Option(False, "--quick", help="A smaller run (a few minutes): fewer steps and questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the world, the model and sampling."),
    recipe: Path = typer.Option(DEFAULT_RECIPE, "--recipe", help="Demo recipe (world, model, rollout, reward, SFT, GRPO).",
                                show_default="configs/demo_world.yaml"),
    until: str = typer.Option(None, "--until", help=f"Stop after this stage: {', '.join(STAGES)}."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress display (stage lines only)."),
    overrides: list[str] = typer.Option(None, "--set", help="Override a recipe field: section.field=value (repeatable; "
                                        "value is YAML), e.g. --set sft.args.max_steps=500."),
) -> None:
    """World -> tiny model -> SFT -> p_i -> GRPO with the AWA reward -> held-out evaluation -> report."""
    from awarl.config_fields import ConfigError
    from awarl.data.records import DataError

    if out is None:  # the two sizes never share a folder (a folder holds one world)
        out = Path("runs/demo-quick" if quick else "runs/demo")
    try:
        run_demo(out, quick=quick, seed=seed, recipe=recipe, progress=not no_progress, until=until,
                 overrides=overrides or ())
    except (DemoError, ConfigError, DataError) as exc:
        fail(exc)


__all__ = ["Demo", "DemoError", "DemoPaths", "DemoRecipe", "check_settings", "run_demo", "demo_command", "capability_summary",
           "capability_warnings", "MANIFEST", "STAGES"]
