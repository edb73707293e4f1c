"""The staged demo: world -> model -> SFT -> p_i -> GRPO -> evaluation -> report, each stage
resumable, under one progress display."""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.demo.recipe import DEFAULT_RECIPE, DemoError, DemoRecipe, check_settings
from awarl.progress import Bar, Progress

MANIFEST = "demo.json"
STAGES = ("world", "model", "sft", "p_i", "grpo", "eval", "report")


@dataclass
class DemoPaths:
    """Where each stage of a demo folder writes, under ``root``. `run_demo` runs the stages inside
    the folder with ``root`` = ``.``, so every path a stage records (the model and data of p_i rows
    and evaluation settings, the recipes beside checkpoints) is relative to the folder and still
    holds after the folder is moved or copied. ``shown`` is the folder as the user named it (for
    messages)."""

    root: Path
    shown: Path | None = None

    def __post_init__(self) -> None:
        r = self.root
        self.shown = self.shown or r
        self.world, self.data, self.model = r / "world", r / "data", r / "model"
        self.sft, self.grpo, self.capability = r / "sft", r / "grpo", r / "capability"
        self.eval, self.report, self.log = r / "eval", r / "report", r / "demo.log"
        self.corpus = self.data / "corpus.jsonl"
        self.trajectories = self.data / "sft_trajectories.jsonl"
        self.timings = r / "timings.json"
        self.settings = r / "recipe.json"

    def records(self, split: str) -> Path:
        return self.data / split / "records.jsonl"

    def p_file(self, split: str) -> Path:
        return self.capability / f"{split}.jsonl"

    def arm(self, name: str) -> Path:
        """GRPO of one arm: its checkpoints, ``final`` and ``metrics_log.jsonl``."""
        return self.grpo / name


class Display:
    """The demo's view on `awarl.progress.Progress`: an overall bar of the stages and the current
    stage's bar with its latest numbers. Messages (warnings, stage results) print above it."""

    def __init__(self, terminal: Any, enabled: bool = True):
        from rich.console import Console

        self.progress = Progress(console=Console(file=terminal, highlight=False, soft_wrap=True), enabled=enabled)
        self.overall = self.progress.add("[bold]demo[/bold]", len(STAGES))
        self.stage: Bar | None = None

    def __enter__(self) -> "Display":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def start(self, name: str, total: int | None, info: str = "") -> None:
        if self.stage is not None:
            self.progress.remove(self.stage)
        self.stage = self.progress.add(f"  {name}", total, info=info)

    def update(self, completed: int | None = None, total: int | None = None, info: str | None = None) -> None:
        if self.stage is not None:
            self.stage.update(completed=completed, total=total, info=info)

    def done(self, message: str, advance: bool = True) -> None:
        """Print a stage's result; ``advance``: the stage is over (a stage may print several)."""
        if advance:
            self.overall.advance()
        self.print(f"[green]✓[/green] {message}")

    def warn(self, message: str) -> None:
        self.print(f"[bold yellow]WARNING[/bold yellow] {message}")

    def print(self, message: str) -> None:
        self.progress.print(message)


@contextmanager
def follow_lines(paths: Path | Sequence[Path], display: Display, total: int, every: float = 1.0) -> Iterator[None]:
    """Move the stage bar with the line count of the JSONL files other stages (or workers) append to."""
    stop = threading.Event()
    paths = [paths] if isinstance(paths, Path) else list(paths)

    def lines(path: Path) -> int:
        try:
            with path.open("rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def count() -> int:
        return sum(lines(path) for path in paths)

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


@dataclass
class Demo:
    """A demo folder and its recipe: the stages, and the settings they share."""

    paths: DemoPaths
    recipe: DemoRecipe
    display: Display
    quick: bool
    seed: int
    workers: int = 1
    """Jobs of one stage (p_i shards, GRPO arms, evaluations) run at once (`awarl.demo.parallel`)."""
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    # ---- settings ----
    @property
    def arms(self) -> list[str]:
        """The GRPO arms, in the recipe's order (the first is the chatbot's agent)."""
        return list(self.recipe.arms)

    @property
    def rollout(self):
        from awarl.agent.settings import RolloutSettings

        return RolloutSettings.from_dict(self._rollout_section(), f"{self.recipe.source}: rollout")

    def _rollout_section(self) -> dict[str, Any]:
        """The recipe's rollout section; a world v2's search noise (``world/noise.json``) filled in."""
        section = dict(self.recipe.train.get("rollout") or {})
        if int(self.recipe.world.get("version", 1)) >= 2 and not section.get("world_noise"):
            from awarl.data.world_noise import NOISE_FILE

            section["world_noise"] = str(self.paths.world / NOISE_FILE)
        return section

    def train_config(self, records: str = "rl", arm: str | None = None, changes: dict[str, Any] | None = None):
        """The training recipe with the demo's paths filled in (SFT then GRPO from SFT's output);
        ``records`` is the split trained on (sft for the SFT stage, rl for GRPO); ``arm`` (default the
        first) picks the arm's sections, and ``changes`` go on top of them."""
        from awarl.demo.recipe import merge
        from awarl.train.config import TrainConfig

        arm = arm or self.arms[0]
        raw = merge(self.recipe.arm_train(arm) if arm in self.recipe.arms else self.recipe.train, changes or {})
        p = self.paths
        raw["output_dir"] = str(p.arm(arm))
        raw["rollout"] = self._rollout_section()
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
                raise DemoError(f"{self.paths.shown} holds a demo of another world ({before} vs {cfg.to_dict()}); "
                                "use another --out, or delete the folder to start over")
            if all(self.paths.records(s).exists() for s in SPLITS) and self.paths.corpus.exists():
                self.display.done(f"world: reused ({world_line(world)})")
                return world
        self.display.start("world", None, "generating")
        files = write_world(world, self.paths.world)
        for split in SPLITS:
            records, _ = load_dataset_file("musique", files[split])  # the official adapter, unchanged
            write_jsonl(self.paths.records(split), (r.to_dict() for r in records))
        shutil.copyfile(files["corpus"], self.paths.corpus)
        self.display.done(f"world: {world_line(world)} -> {self.paths.shown / 'world'}")
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
        params = count_params(self.paths.model)
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
                                                                abstain_share=self.recipe.abstain_share,
                                                                renamed_copies=self.recipe.renamed_copies,
                                                                originals=self.recipe.originals,
                                                                rename_ids=self.recipe.rename_ids,
                                                                clarified_share=self.recipe.clarified_share,
                                                                misread_share=self.recipe.misread_share))
        wrong_on_purpose = self.recipe.abstain_share < 1.0 or self.recipe.misread_share > 0.0  # guesses, misreadings
        if wrong_on_purpose and "wrong" not in config.sft.keep_outcomes:
            config.sft.keep_outcomes = [*config.sft.keep_outcomes, "wrong"]
        steps = int(config.sft.args.get("max_steps", 0))
        resume = latest_checkpoint(self.paths.sft)
        self.display.start("sft", steps, f"resuming from {resume.name}" if resume else "")
        losses: list[float] = []

        def on_line(line: str) -> None:
            print(line, flush=True)  # stdout is demo.log here
            fields = summary_fields(line)
            if "step" in fields:
                if "loss" in fields:
                    losses.append(fields["loss"])
                self.display.update(completed=int(fields["step"]), info=f"loss {fields.get('loss', float('nan')):.3f}")

        with self.timed("sft"):
            sft.main(config, on_log=on_line, resume=str(resume) if resume else None)
        resumed = f" (resumed from {resume.name})" if resume else ""
        self.display.done(f"sft: {steps} steps{resumed} on {len(world.split('sft'))} gold trajectories, final loss "
                          f"{losses[-1] if losses else float('nan'):.3f}")

    def capability_stage(self) -> None:
        from awarl.capability import CapabilityConfig, summarize
        from awarl.data.records import load_records

        for split in ("rl", "eval"):
            n = len(load_records(self.paths.records(split)))
            out = self.paths.p_file(split)
            self.display.start(f"p_i ({split})", n, f"K={self.recipe.k} at T={self.recipe.temperature:g}")
            config = CapabilityConfig(model=str(self.paths.sft / "final"), data=self.paths.records(split), out=out,
                                      rollout=self.rollout, k=self.recipe.k, temperature=self.recipe.temperature, corpus=self.paths.corpus,
                                      seed=self.seed, backend_options={"device": self.recipe.device})
            with self.timed("p_i"):
                self.estimate_split(config, n)
            summary = summarize(out)
            self.display.print(f"  p_i ({split}): mean {summary.mean_p:.2f} over {summary.queries} questions; "
                               f"unparsable {summary.unparsable:.0%} of rollouts")
            messages = summary.warnings()
            world_json = self.paths.world / "world.json"
            if int(self.recipe.world.get("version", 1)) >= 2 and world_json.exists():
                from awarl.eval.world_audit import MIDDLE_SHARE, base_spread

                spread = base_spread(out, world_json)
                self.display.print(f"  p_i ({split}) spread on answerable questions: " + ", ".join(
                    f"{c.name} {c.value:.2f}" + ("" if c.ok else f" (bound {c.bound}: missed)") for c in spread.checks))
                missed = [c.name for c in spread.checks if not c.ok]
                if missed and split == "rl":
                    index_order = self.recipe.world.get("tie_order", "index") == "index"
                    why = ("Every kind of question with a ceiling in (0.2, 0.5) shows several people of one name, and "
                           "the tiny model reads those far below their ceilings, so most of them get p <= 0.2 (the "
                           "report's table by kind of question). A reader that reads them well has no middle p_i "
                           "either: it follows the first of the people shown, whom the index shows first in every "
                           "rollout, so its p_i on such a question is near 0 or near 1 and only a kind's mean is j/m. "
                           "The world knob tie_order: rollout draws that order per rollout (a new world: its bases are "
                           "rebuilt; docs/fidelity.md, \"By kind of question\"). AWA then has few questions it is "
                           "unsure of to shape." if missed == [MIDDLE_SHARE] and index_order else
                           "The base's p_i does not follow the world's ceilings as the study needs; the report's table by "
                           "kind of question shows where it reads below them.")
                    self.warn(f"p_i (rl): the base misses the spread bounds of docs/fidelity.md (World v2, a base with "
                              f"spread): {', '.join(missed)}. {why}")
            if messages:
                self.warn(f"p_i ({split}): {' '.join(messages)} The demo's SFT stage is sft.args.max_steps in the "
                          "recipe (the world v2 model reads its search results after ~800 steps); rerun with a new --out.")
        self.display.done("p_i: estimated on the RL and held-out splits")

    def estimate_split(self, config: Any, n: int) -> None:
        """p_i of one split: in this process, or in ``workers`` shards merged into ``config.out`` (a
        split begun in one process resumes in one)."""
        from dataclasses import replace

        from awarl.capability import estimate
        from awarl.capability.shards import merge, shard_path
        from awarl.demo.parallel import Job, run_jobs

        if self.workers <= 1 or config.out.exists():
            with follow_lines(config.out, self.display, n):
                estimate(config, progress=False)
            return
        shards = [shard_path(config.out, i, self.workers) for i in range(self.workers)]
        jobs = [Job(f"p_i shard {i}/{self.workers}", estimate, {"config": replace(config, shard=(i, self.workers)),
                                                                "progress": False}) for i in range(self.workers)]
        with follow_lines(shards, self.display, n):
            run_jobs(jobs, self.workers)
        merge(shards, config.out, data=config.data)
        for shard in shards:
            shard.unlink()

    def grpo_stage(self) -> None:
        todo = [arm for arm in self.arms if not (self.paths.arm(arm) / "final" / "config.json").exists()]
        lines = [f"grpo ({arm}): reused" for arm in self.arms if arm not in todo]
        if self.workers > 1 and len(todo) > 1:
            configs = self.train_arms_at_once(todo)
        else:
            configs = {}
            for arm in todo:
                with self.timed(f"grpo ({arm})"):
                    configs[arm] = self.train_arm(arm)
        lines += [f"grpo ({arm}, reward {config.reward.kind}): {config.grpo.get('max_steps')} steps "
                  f"({generation_batches(config)} generation batches of {prompts_per_batch(config)} "
                  f"prompts x {config.grpo.get('num_generations')})" for arm, config in configs.items()]
        for i, line in enumerate(lines):  # one line per arm, one step of the overall bar for the stage
            self.display.done(line, advance=i == len(lines) - 1)

    def train_arms_at_once(self, arms: Sequence[str]) -> dict[str, Any]:
        """`train_arm` for several arms at once, one worker process each (``workers`` at a time)."""
        from awarl.demo.parallel import Job, run_jobs, train_grpo

        configs, jobs, logs = {}, [], []
        for arm in arms:
            config = configs[arm] = self.train_config(arm=arm)
            folder = self.paths.arm(arm)
            config.output_dir = str(folder)
            resume = latest_checkpoint(folder)
            jobs.append(Job(f"grpo ({arm})", train_grpo, {"config": config, "folder": folder,
                                                          "resume": str(resume) if resume else None}))
            logs.append(folder / "metrics_log.jsonl")
        total = sum(int(c.grpo.get("max_steps", 0)) for c in configs.values())
        self.display.start(f"grpo ({', '.join(arms)})", total, f"{min(self.workers, len(arms))} processes")
        with self.timed(f"grpo ({' + '.join(arms)} at once)"), follow_lines(logs, self.display, total):
            run_jobs(jobs, self.workers)
        return configs

    def train_arm(self, arm: str, changes: dict[str, Any] | None = None, folder: Path | None = None):
        """GRPO from the SFT checkpoint and p_i under arm ``arm``'s recipe (with ``changes`` on top), into
        ``folder`` (default ``grpo/<arm>``), resuming from its last checkpoint; returns its TrainConfig."""
        config = self.train_config(arm=arm, changes=changes)
        folder = folder or self.paths.arm(arm)
        config.output_dir = str(folder)
        steps = int(config.grpo.get("max_steps", 0))
        resume = latest_checkpoint(folder)
        self.display.start(f"grpo ({arm})", steps, f"resuming from {resume.name}" if resume else "")

        def on_log(step: int, total: int, row: dict[str, Any]) -> None:
            info = " ".join(f"{label} {row[key]:.2f}" for key, label in (
                ("awa/refusal_rate", "refuse"), ("awa/expected_refusal_rate", "exp"), ("awa/penalty", "P"),
                ("awa/accuracy", "acc")) if isinstance(row.get(key), (int, float)))
            self.display.update(completed=step, info=info)

        from awarl.demo.parallel import train_grpo

        train_grpo(config, folder, str(resume) if resume else None, on_log)
        return config

    def evaluate(self, model: Path, out: Path, label: str) -> dict[str, Any]:
        """Greedy evaluation of ``model`` on the held-out records (with the SFT checkpoint's p_i), resumable;
        returns the run's metrics."""
        from awarl.eval.run import run_eval

        config = self.eval_config(model, out, label)
        self.display.start(f"eval ({label})", self.eval_count(), "greedy")
        with follow_lines(out / "trajectories.jsonl", self.display, self.eval_count()):
            return run_eval(config, progress=False).metrics

    def eval_config(self, model: Path, out: Path, label: str) -> Any:
        """Greedy evaluation of ``model`` on the held-out records (with the SFT checkpoint's p_i)."""
        from awarl.eval.run import EvalConfig

        return EvalConfig(model=str(model), data=self.eval_records_with_p(), out=out, name=label,
                          rollout=self.rollout, corpus=self.paths.corpus, temperature=0.0, seed=self.seed,
                          backend_options={"device": self.recipe.device})

    def eval_count(self) -> int:
        with self.eval_records_with_p().open(encoding="utf-8") as f:
            return sum(1 for _ in f)

    def eval_stage(self) -> dict[str, Any]:
        """The SFT checkpoint ("before RL") and every arm on the held-out questions, keyed sft / arm name."""
        runs = [("sft", self.paths.sft / "final", "before RL")]
        runs += [(arm, self.paths.arm(arm) / "final", f"after RL ({arm})") for arm in self.arms]
        if self.workers > 1:
            results = self.evaluate_at_once(runs)
        else:
            results = {}
            for name, model, label in runs:
                with self.timed("eval"):
                    results[name] = self.evaluate(model, self.paths.eval / name, label)
        for name, model, label in runs:
            o = results[name]["overall"]
            self.display.print(f"  {label}: precision {o['precision']:.2f}, accuracy {o['accuracy']:.2f}, "
                               f"RA-F1 {o['ra_f1']:.2f}, refusal {o['refusal_rate']:.2f}")
            unparsable = o.get("no_parsable_answer", 0) / max(o["n"], 1)
            if unparsable > 0.5:
                self.warn(f"{label}: {unparsable:.0%} of held-out replies have no parsable <answer>; the checkpoint "
                          f"did not learn the protocol. Raise sft.args.max_steps in the recipe, or check "
                          f"rollout.max_completion_tokens (see {self.paths.shown / 'demo.log'}).")
        self.display.done(f"eval: before RL and after RL ({', '.join(self.arms)}) on held-out questions")
        return results

    def evaluate_at_once(self, runs: Sequence[tuple[str, Path, str]]) -> dict[str, Any]:
        """`evaluate` of several models, ``workers`` processes at a time; metrics by run name."""
        from awarl.demo.parallel import Job, evaluate_metrics, run_jobs

        jobs = [Job(name, evaluate_metrics, {"config": self.eval_config(model, self.paths.eval / name, label)})
                for name, model, label in runs]
        total = self.eval_count() * len(runs)
        self.display.start(f"eval ({', '.join(label for _, _, label in runs)})", total,
                           f"greedy, {min(self.workers, len(runs))} processes")
        with self.timed("eval"), follow_lines([self.paths.eval / name / "trajectories.jsonl" for name, _, _ in runs],
                                              self.display, total):
            return run_jobs(jobs, self.workers)

    def eval_records_with_p(self) -> Path:
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
            "agent": rel(p.arm(self.arms[0]) / "final"),
            "agents": {arm: rel(p.arm(arm) / "final") for arm in self.arms},
            "sft_agent": rel(p.sft / "final"),
            "rollout": self.rollout.to_dict(),
        }
        path = p.root / MANIFEST
        path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return path


def run_demo(out: Path, *, quick: bool = False, seed: int = 0, recipe: Path = DEFAULT_RECIPE,
             progress: bool = True, until: str | None = None, overrides: Sequence[str] = (),
             workers: int | None = None) -> dict[str, Any]:
    """Run (or resume) every stage; returns the report's metrics. ``until`` stops after a stage;
    ``overrides`` (``section.field=value``) change the recipe; ``workers`` (default `default_workers`)
    is how many jobs of one stage run at once."""
    from awarl.train.callbacks import quiet_terminal

    if until is not None and until not in STAGES:
        raise DemoError(f"--until must be one of {', '.join(STAGES)}, got {until!r}")
    from awarl.demo.parallel import quiet_libraries

    quiet_libraries()
    loaded = DemoRecipe.load(recipe, quick=quick, seed=seed, overrides=overrides)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with quiet_terminal(out / "demo.log") as terminal, Display(terminal, enabled=progress) as display, inside(out):
        from awarl.demo.parallel import default_workers

        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise DemoError(f"--workers must be at least 1, got {workers}")
        demo = Demo(DemoPaths(Path("."), shown=out), loaded, display, quick, seed, workers)
        if demo.paths.timings.exists():
            demo.timings = json.loads(demo.paths.timings.read_text(encoding="utf-8"))
        display.print(f"[bold]awarl demo[/bold] -> {out} ({'quick' if quick else 'full'}, seed {seed}); "
                      f"library output goes to {out / 'demo.log'}")
        check_recipe(demo)  # fail on a bad recipe before any work, and before the folder records it
        check_settings(demo.paths.settings, loaded, folder=out)
        return _stages(demo, until, t0)


def check_recipe(demo: Demo) -> None:
    """Build now what the stages will build from the recipe: the world's settings, the model's shape and
    every arm's training recipe (not only the first arm's). A misspelt or invalid field then fails at once,
    before ``recipe.json`` records the settings (which would refuse the corrected rerun on this folder)."""
    from awarl.data.world import WorldConfig
    from awarl.train.tiny import WORLD_SHAPE

    WorldConfig.from_dict(demo.recipe.world, f"{demo.recipe.source}: world")
    fields = sorted(WORLD_SHAPE.__dict__)
    for key in demo.recipe.shape:
        if key not in fields:
            raise DemoError(f"{demo.recipe.source}: shape.{key} is not a field of the model's shape "
                            f"({', '.join(fields)})")
    for arm in demo.arms:
        demo.train_config(arm=arm)


def _stages(demo: Demo, until: str | None, t0: float) -> dict[str, Any]:
    """The stages in order, up to ``until``."""
    with demo.timed("world"):
        world = demo.world_stage()
    demo.write_manifest()
    if until != "world":
        with demo.timed("model"):
            demo.model_stage(world)
    if until not in ("world", "model"):
        demo.sft_stage(world)
        demo.write_manifest()
    if until in ("world", "model", "sft"):
        return {}
    demo.capability_stage()
    if until == "p_i":
        return {}
    demo.grpo_stage()
    demo.write_manifest()
    if until == "grpo":
        return {}
    results = demo.eval_stage()
    demo.timings["total_this_run"] = round(time.perf_counter() - t0, 1)
    return _report(demo, world, results)


@contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run with ``folder`` as the working directory, and come back."""
    import os

    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _report(demo: Demo, world: Any, results: dict[str, Any]) -> dict[str, Any]:
    from awarl.demo.report import build_report

    metrics = build_report(demo, world, results)
    demo.display.done(f"report: {demo.paths.shown / 'report' / 'report.md'}")
    for line in metrics["headline"]:
        demo.display.print(line)
    return metrics


# -- small helpers -------------------------------------------------------------------------------------------
def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` of a training folder (None: start from step 0)."""
    from awarl.train.grpo import resume_checkpoint

    if not any(folder.glob("checkpoint-*/trainer_state.json")):
        return None
    return resume_checkpoint("latest", folder)


def world_line(world: Any) -> str:
    """The world's size in one line (persons, passages, questions per split, held-out unanswerable share)."""
    s = world.stats()
    return (f"{s['persons']} persons, {s['passages']} passages, {s['questions']} questions "
            f"(SFT {s['sft']['questions']} / RL {s['rl']['questions']} / held-out {s['eval']['questions']}; "
            f"{s['eval']['unanswerable_share']:.0%} of held-out unanswerable)")


def count_params(folder: Path) -> int:
    """Parameters of a Qwen2-shaped model, from its config.json (no weights loaded)."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    h, i, n, v = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    return v * h + n * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + h


def summary_fields(line: str) -> dict[str, float]:
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


def generation_batches(config: Any) -> int:
    """Generation batches of a GRPO run: TRL generates once every ``steps_per_generation x num_iterations``
    micro-batches (each batch is optimized on ``num_iterations`` times)."""
    g = config.grpo
    per_gen = int(g.get("steps_per_generation") or g.get("gradient_accumulation_steps", 1))
    per_gen *= int(g.get("num_iterations") or 1)
    return math.ceil(int(g.get("max_steps", 0)) * int(g.get("gradient_accumulation_steps", 1)) / per_gen)


def prompts_per_batch(config: Any) -> int:
    g = config.grpo
    per_gen = int(g.get("steps_per_generation") or g.get("gradient_accumulation_steps", 1))
    return int(g.get("per_device_train_batch_size", 8)) * per_gen // int(g.get("num_generations", 8))
