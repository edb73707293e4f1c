"""Settings of the chat server: what it serves, what it checks against, where it keeps things.

`load_chat_config` reads ``configs/chat/*.yaml``; `default_settings` builds the embedded
default that ``awarl chat serve`` uses with no flags: the synthetic-world demo's agent (from
``awarl demo --out runs/demo``) over the world corpus, checked against the world's policy. With
no trained agent present it serves in validate-only mode and says why (``mode_note``). Relative
paths in a config file are read from the current directory, like every other awarl recipe.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from awarl.agent.settings import RolloutSettings
from awarl.config_fields import ConfigError, build, doc, read_yaml_file
from awarl.resources import config_path

log = logging.getLogger(__name__)

DEMO_DIR = Path("runs/demo")
WORLD_CACHE = Path(".cache/awarl-chat/world")

ChatConfigError = ConfigError
"""A bad chat config: awarl's one `ConfigError` (the message names the file and the key)."""


@dataclass
class ChatSettings:
    """Everything `awarl.chat.app.create_app` needs. Every field has a default except the policy."""

    policy: str = doc("Path of the policy checked by default (awarl YAML or a Bedrock policy-definition JSON).",
                      default="")
    policies: dict[str, str] = doc("More policies the admin may switch to (name -> path); the default policy is "
                                   "added as policy_name, and every shipped policy (pricing, benefits) as its "
                                   "stem.", default={})
    policy_name: str = doc("Name of the default policy (default: the file's stem, or 'world' for a world policy).",
                           default="")
    generator: str | None = doc("Backend spec of the agent (hf:PATH, vllm:PATH, openai:URL#MODEL); null = "
                                "validate-only mode.", default=None)
    rewrite_generator: str | None = doc("A second spec for rewrite turns (default: the generator).", default=None)
    decisions: Literal["auto", "on", "off"] = doc(
        "Whether the generator answers rewrite prompts with DECISION lines (auto: on for openai:, http:// and "
        "https:// specs, off for local checkpoints, which get verify-and-resample).", default="auto")
    corpus: str | None = doc("corpus.jsonl the agent searches and citations are checked against.", default=None)
    index: str | None = doc("A saved index folder or a retrieval server URL to search instead of indexing "
                            "corpus in memory.", default=None)
    rollout: RolloutSettings | None = doc("Rollout settings when the checkpoint has none saved (the demo "
                                          "manifest's); a mapping of RolloutSettings fields.", default=None)
    corrections: str | None = doc("Known-errors YAML injected into every prompt (default: the shipped "
                                  "configs/policies/corrections.yaml).", default=None)
    translator: Literal["pattern", "llm"] = doc("pattern (offline, the policy's patterns) or llm (at llm_url).",
                                                default="pattern")
    llm_url: str | None = doc("OpenAI-compatible API root of the llm translator and judge.", default=None)
    llm_model: str | None = doc("Model name at llm_url.", default=None)
    llm_samples: int = doc("Independent translations the llm translator draws.", default=3)
    judge: Literal["lexical", "llm", "none"] = doc("Citation support judge: lexical, llm (at llm_url) or none.",
                                                   default="lexical")
    second_judge: str | None = doc("openai:URL#MODEL of a second judge that cross-checks BORDERLINE citations "
                                   "before they reach review.", default=None)
    max_iterations: int = doc("Rewrites allowed per thread (counted exactly).", default=3)
    max_questions: int = doc("Clarifying questions per round (1-5).", default=5)
    max_question_rounds: int = doc("Rounds of clarifying questions per thread.", default=1)
    question_timeout_s: float = doc("Pending clarifying questions are skipped automatically after this long.",
                                    default=300.0)
    temperature: float = doc("Sampling temperature of verify-and-resample.", default=1.0)
    resample_feedback: bool = doc("Verify-and-resample re-asks with the finding as feedback; false re-asks the bare "
                                  "question (for a small agent trained only on bare questions, which added text "
                                  "derails).", default=True)
    retries: int = doc("Attempts of a generation or validation call before the thread ends in ERROR.", default=3)
    backoff_s: float = doc("First wait between attempts; doubles every retry.", default=0.5)
    generation_timeout_s: float = doc("Time limit of one generation call.", default=300.0)
    check_timeout_ms: int = doc("Time budget of one finding's check; past it, TOO_COMPLEX.", default=5000)
    workers: int = doc("Threads processed at once (a generation batch holds at most one request per worker).", default=4)
    batch_size: int = doc("Generation requests of concurrent threads run as one batched rollout, this many at most "
                          "(1: one at a time).", default=32)
    batch_window_ms: float = doc("After the first generation request, how long the agent waits for more to batch "
                                 "with it.", default=20.0)
    db: str = doc("SQLite file of threads, reviews and the audit head.", default="runs/chat/chat.sqlite")
    db_timeout_s: float = doc("How long a database statement waits for another connection's lock before the attempt "
                              "fails (then retried with backoff; after retries the thread ends in ERROR).", default=5.0)
    audit: str = doc("Audit log (JSON lines, hash-chained).", default="runs/chat/audit.jsonl")
    audit_secret_env: str = doc("Environment variable holding the HMAC key of the audit chain (unset: the key file "
                                "<db>.audit-key, generated at first start, mode 0600).", default="AWARL_AUDIT_SECRET")
    recovery: Literal["resume", "error"] = doc("Threads left PROCESSING by a crash: resume them, or end them in "
                                               "ERROR (both audited).", default="resume")
    prompts_dir: str | None = doc("Folder of prompt templates (default: the shipped ones).", default=None)
    host: str = doc("Address to bind (127.0.0.1: this machine only).", default="127.0.0.1")
    port: int = doc("TCP port (1-65535).", default=8080)
    allowed_hosts: list[str] = doc("Host header values served (default: the bind address, localhost, 127.0.0.1); any "
                                   "other is refused with 403, so a web page cannot reach the API by DNS rebinding.",
                                   default=[])
    admin_token: str | None = doc("The admin token (config changes, policy switches, every thread and review); prefer "
                                  "admin_token_env or the token file <db>.admin-token generated at first start.",
                                  default=None)
    admin_token_env: str = doc("Environment variable holding the admin token.", default="AWARL_CHAT_ADMIN_TOKEN")
    reviewers: dict[str, str] = doc("Reviewer name -> token (at least 16 characters); review decisions need one, and "
                                    "the name is recorded and audited with each decision.", default={})
    generators: list[str] = doc("Backend specs POST /api/config may switch to, besides the configured generator; a "
                                "spec sent by a client that is not listed here is refused.", default=[])
    mode_note: str = doc("Why the server runs as it does (shown on the page and logged).", default="")

    def __post_init__(self) -> None:
        if isinstance(self.rollout, dict):
            self.rollout = RolloutSettings.from_dict(self.rollout, "rollout")
        for name in ("max_iterations", "max_question_rounds", "llm_samples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.max_questions <= 5:
            raise ConfigError(f"max_questions must be in [1, 5], got {self.max_questions}")
        if self.workers < 1 or self.retries < 1 or self.batch_size < 1:
            raise ConfigError(f"workers, retries and batch_size must be >= 1, got {self.workers}, {self.retries} and "
                              f"{self.batch_size}")
        if not self.batch_window_ms >= 0:
            raise ConfigError(f"batch_window_ms must be >= 0, got {self.batch_window_ms}")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"port must be in [1, 65535], got {self.port}")
        for name in ("question_timeout_s", "generation_timeout_s", "check_timeout_ms", "db_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("temperature", "backoff_s"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name, token in self.reviewers.items():
            if not isinstance(token, str) or len(token) < 16:
                raise ConfigError(f"reviewers.{name}: the token must be a string of at least 16 characters")
        if len(set(self.reviewers.values())) < len(self.reviewers):
            raise ConfigError("reviewers: two reviewers share a token, so decisions could not name who made them")
        if self.admin_token is not None and len(self.admin_token) < 16:
            raise ConfigError("admin_token must be at least 16 characters")
        needs_llm = [f"{name}: llm" for name in ("translator", "judge") if getattr(self, name) == "llm"]
        missing = [name for name in ("llm_url", "llm_model") if not getattr(self, name)]
        if needs_llm and missing:  # else the first thread would fail at setup, or the judge at its first call
            raise ConfigError(f"{' and '.join(needs_llm)} needs {' and '.join(missing)} (an OpenAI-compatible API root "
                              "and the model name there)")
        if self.corrections is None and config_path("policies", "corrections.yaml").exists():
            self.corrections = str(config_path("policies", "corrections.yaml"))
        if self.policy:
            self.policy_name = self.policy_name or ("world" if Path(self.policy).name == "policy.yaml" else Path(self.policy).stem)
            self.policies = {self.policy_name: self.policy, **{k: v for k, v in self.policies.items() if k != self.policy_name}}
        for name, default in shipped_policies().items():
            self.policies.setdefault(name, default)

    def uses_decisions(self, spec: str | None) -> bool:
        if self.decisions != "auto":
            return self.decisions == "on"
        return bool(spec) and spec.startswith(("openai:", "http://", "https://"))


def shipped_policies() -> dict[str, str]:
    folder = config_path("policies")
    return {p.stem: str(p) for p in sorted(folder.glob("*.yaml"))
            if not p.name.endswith(".tests.yaml") and p.stem != "corrections"} if folder.exists() else {}


def load_chat_config(path: str | Path, **overrides: Any) -> ChatSettings:
    """Read a chat config YAML through `awarl.config_fields.build`: an unknown key (with the closest
    known one), a value of the wrong type or range, or a missing input file is a `ConfigError`
    naming the file and the key. ``overrides`` (the command line's, None = not given) win."""
    path = Path(path)
    raw = read_yaml_file(path, "chat config")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    if not raw.get("policy"):
        raise ConfigError(f"{path}, key 'policy': missing (a policy YAML or Bedrock policy JSON to check against)")
    values = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    for key in ("policy", "corpus", "corrections"):
        if isinstance(values.get(key), str) and values[key] and not Path(values[key]).exists():
            shipped = _shipped(values[key])
            if shipped is None:
                raise ConfigError(f"{path}, key '{key}': {values[key]} does not exist")
            values[key] = str(shipped)
    if not values.get("generator") and not values.get("mode_note"):
        values["mode_note"] = (f"Validate-only mode: {path} names no generator. POST /api/chat with an `answer` to "
                               "check it, or set `generator:` to a backend spec (hf:PATH, vllm:PATH, openai:URL#MODEL).")
    return build(ChatSettings, values, f"{path}:", nested={"rollout": _rollout})


def _shipped(value: str) -> Path | None:
    """A relative ``configs/…`` path of a shipped config, found in the package when the working folder
    has no such file (a shipped chat config names its policy as ``configs/policies/…`` so that it reads
    the same from the repository's root and from anywhere else)."""
    rel = Path(value)
    if rel.is_absolute() or not rel.parts or rel.parts[0] != "configs":
        return None
    candidate = config_path(*rel.parts[1:])
    return candidate if candidate.exists() else None


def _rollout(value: Any, where: str) -> RolloutSettings | None:
    return None if value is None else RolloutSettings.from_dict(value, where)


def default_settings(demo: str | Path = DEMO_DIR, **overrides: Any) -> ChatSettings:
    """The embedded default: the world demo's agent, corpus and policy; validate-only without an agent."""
    manifest = Path(demo) / "demo.json"
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if manifest.exists():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        base = manifest.parent

        def rel(key: str) -> str | None:
            return str(base / m[key]) if m.get(key) else None

        agent = rel("agent") or rel("sft_agent")
        if agent and not (Path(agent) / "config.json").exists():
            agent = None
        # The note is shown on open routes (/api/config, /api/health): names inside the demo folder, never a server path.
        def shown(key: str | None = None) -> str:
            value = Path(m.get(key) or "") if key else None
            return Path(demo).name if value is None else str(value.name if value.is_absolute() else Path(Path(demo).name, value))

        note = (f"Serving the synthetic-world agent {shown('agent' if m.get('agent') else 'sft_agent')} over "
                f"{shown('corpus')}, checked against the world's policy." if agent else
                f"Validate-only mode: the demo folder {shown()} names no trained agent yet. Run `awarl demo` into it to "
                "train one; meanwhile POST /api/chat with an `answer` to check it.")
        generator = overrides.pop("generator", f"hf:{agent}" if agent else None)  # --generator serves another agent
        if generator and generator != f"hf:{agent}":
            # the spec as the config names it: /api/config lists it among the generators anyway
            note = f"Serving {generator} over {shown('corpus')}, checked against the world's policy."
        # The world agent is a tiny model trained on bare questions: feedback text appended to the question
        # derails it into broken tool calls, so it is resampled on the bare question (docs/chat.md).
        overrides.setdefault("resample_feedback", False)
        # A generation batch holds at most one request per worker: enough workers for the batches to fill.
        overrides.setdefault("workers", 32)
        return ChatSettings(policy=rel("policy") or "", policy_name="world", corpus=rel("corpus"),
                            generator=generator,
                            rollout=RolloutSettings.from_dict(m["rollout"], f"{manifest}: rollout") if m.get("rollout") else None,
                            mode_note=note, **overrides)
    world = _cached_world()
    if world is not None:
        return ChatSettings(policy=str(world / "policy.yaml"), policy_name="world", corpus=str(world / "corpus.jsonl"),
                            mode_note=(f"Validate-only mode: no demo in {Path(demo).name}. Run `awarl demo` to train "
                                       "the world agent; meanwhile the cached world is checked: POST /api/chat with "
                                       "an `answer`."), **overrides)
    pricing = shipped_policies().get("pricing", "")
    return ChatSettings(policy=pricing, mode_note="Validate-only mode: no world demo and no world generator; "
                        "checking answers against the pricing policy.", **overrides)


def _cached_world() -> Path | None:
    """A default world with its policy, generated once into a cache folder (no demo has run)."""
    try:
        from awarl.data.world import WorldConfig, generate_world, write_world
    except ImportError:
        return None
    if not (WORLD_CACHE / "policy.yaml").exists():
        # Written beside and renamed, so a second server starting at once never reads half a world.
        tmp = WORLD_CACHE.with_name(f"{WORLD_CACHE.name}.tmp{os.getpid()}")
        write_world(generate_world(WorldConfig()), tmp)
        try:
            tmp.rename(WORLD_CACHE)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return WORLD_CACHE
