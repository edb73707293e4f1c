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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEMO_DIR = Path("runs/demo")
WORLD_CACHE = Path(".cache/awarl-chat/world")


class ChatConfigError(ValueError):
    """A bad chat config; the message names the file and the key."""


@dataclass
class ChatSettings:
    """Everything `awarl.chat.app.create_app` needs. Every field has a default except the policy."""

    policy: str = ""
    """Path of the policy checked by default (awarl YAML or a Bedrock policy-definition JSON)."""
    policies: dict[str, str] = field(default_factory=dict)
    """More policies a user may switch to (name -> path); the default policy is added as ``policy_name``."""
    policy_name: str = ""
    """Name of the default policy (default: the file's stem, or 'world' for a world policy)."""
    generator: str | None = None
    """Backend spec of the agent (hf:PATH, vllm:PATH, openai:URL#MODEL); null = validate-only mode."""
    rewrite_generator: str | None = None
    """A second spec for rewrite turns (default: the generator)."""
    decisions: str = "auto"
    """auto | on | off: whether the generator answers rewrite prompts with DECISION lines (auto: on for
    openai: specs, off for local checkpoints, which get verify-and-resample)."""
    corpus: str | None = None
    """corpus.jsonl the agent searches and citations are checked against."""
    index: str | None = None
    """A saved index folder or a retrieval server URL to search instead of indexing ``corpus`` in memory."""
    rollout: dict[str, Any] = field(default_factory=dict)
    """Rollout settings when the checkpoint has none saved (the demo manifest's)."""
    corrections: str | None = None
    """Known-errors YAML injected into every prompt (default: configs/policies/corrections.yaml)."""
    translator: str = "pattern"
    """pattern (offline, the policy's patterns) or llm."""
    llm_url: str | None = None
    llm_model: str | None = None
    llm_samples: int = 3
    judge: str = "lexical"
    """Citation support judge: lexical, llm (at llm_url) or none."""
    second_judge: str | None = None
    """openai:URL#MODEL of a second judge that cross-checks BORDERLINE citations before they reach review."""
    max_iterations: int = 3
    """Rewrites allowed per thread (counted exactly)."""
    max_questions: int = 5
    max_question_rounds: int = 1
    question_timeout_s: float = 300.0
    """Pending clarifying questions are skipped automatically after this long."""
    temperature: float = 1.0
    """Sampling temperature of verify-and-resample."""
    resample_feedback: bool = True
    """Verify-and-resample re-asks with the finding as feedback; false re-asks the bare question (for a
    small agent trained only on bare questions, which added text derails)."""
    retries: int = 3
    backoff_s: float = 0.5
    generation_timeout_s: float = 300.0
    check_timeout_ms: int = 5000
    workers: int = 4
    db: str = "runs/chat/chat.sqlite"
    audit: str = "runs/chat/audit.jsonl"
    audit_secret_env: str = "AWARL_AUDIT_SECRET"
    """Environment variable holding the HMAC key of the audit chain (unset: plain SHA-256)."""
    recovery: str = "resume"
    """Threads left PROCESSING by a crash: resume them, or end them in ERROR (both audited)."""
    prompts_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    mode_note: str = ""
    """Why the server runs as it does (shown on the page and logged)."""

    def __post_init__(self) -> None:
        if self.decisions not in ("auto", "on", "off"):
            raise ChatConfigError(f"decisions must be auto, on or off, got {self.decisions!r}")
        if self.recovery not in ("resume", "error"):
            raise ChatConfigError(f"recovery must be resume or error, got {self.recovery!r}")
        if self.translator not in ("pattern", "llm"):
            raise ChatConfigError(f"translator must be pattern or llm, got {self.translator!r}")
        if self.judge not in ("lexical", "llm", "none"):
            raise ChatConfigError(f"judge must be lexical, llm or none, got {self.judge!r}")
        for name in ("max_iterations", "max_question_rounds", "llm_samples"):
            if getattr(self, name) < 0:
                raise ChatConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.max_questions <= 5:
            raise ChatConfigError(f"max_questions must be in [1, 5], got {self.max_questions}")
        if self.workers < 1 or self.retries < 1:
            raise ChatConfigError("workers and retries must be >= 1")
        if self.corrections is None and (REPO_CONFIGS / "policies" / "corrections.yaml").exists():
            self.corrections = str(REPO_CONFIGS / "policies" / "corrections.yaml")
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
    folder = REPO_CONFIGS / "policies"
    return {p.stem: str(p) for p in sorted(folder.glob("*.yaml"))
            if not p.name.endswith(".tests.yaml") and p.stem != "corrections"} if folder.exists() else {}


def load_chat_config(path: str | Path, **overrides: Any) -> ChatSettings:
    """Read a chat config YAML; unknown keys and bad values are errors naming the file and key."""
    path = Path(path)
    if not path.exists():
        raise ChatConfigError(f"{path}: file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ChatConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ChatConfigError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    known = {f.name for f in fields(ChatSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ChatConfigError(f"{path}: unknown key(s) {unknown}; known: {sorted(known)}")
    if not raw.get("policy"):
        raise ChatConfigError(f"{path}, key 'policy': missing (a policy YAML or Bedrock policy JSON to check against)")
    values = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    for key in ("policy", "corpus", "corrections"):
        if values.get(key) and not Path(values[key]).exists():
            raise ChatConfigError(f"{path}, key '{key}': {values[key]} does not exist")
    if not values.get("generator") and not values.get("mode_note"):
        values["mode_note"] = (f"Validate-only mode: {path} names no generator. POST /api/chat with an `answer` to "
                               "check it, or set `generator:` to a backend spec (hf:PATH, vllm:PATH, openai:URL#MODEL).")
    try:
        return ChatSettings(**values)
    except (TypeError, ChatConfigError) as exc:
        raise ChatConfigError(f"{path}: {exc}") from None


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
        note = (f"Serving the synthetic-world agent {agent} over {rel('corpus')}, checked against the world's policy."
                if agent else
                f"Validate-only mode: {manifest} names no trained agent yet. Run `awarl demo --out {demo}` to train "
                "one; meanwhile POST /api/chat with an `answer` to check it.")
        # The world agent is a tiny model trained on bare questions: feedback text appended to the question
        # derails it into broken tool calls, so it is resampled on the bare question (docs/chat.md).
        overrides.setdefault("resample_feedback", False)
        return ChatSettings(policy=rel("policy") or "", policy_name="world", corpus=rel("corpus"),
                            generator=f"hf:{agent}" if agent else None, rollout=m.get("rollout") or {},
                            mode_note=note, **overrides)
    world = _cached_world()
    if world is not None:
        return ChatSettings(policy=str(world / "policy.yaml"), policy_name="world", corpus=str(world / "corpus.jsonl"),
                            mode_note=(f"Validate-only mode: no demo at {manifest}. Run `awarl demo --out {demo}` to train "
                                       f"the world agent; meanwhile the world ({world}) is checked: POST /api/chat with "
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
