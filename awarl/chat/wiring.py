"""The chat server's wiring: its settings turned into the parts the service runs.

`Wiring` reads the settings once and builds, each when first needed: the prompts and loop
settings, the corrections, the corpus, the policies (all read at start, so a broken file is named
then), a `Validator` per policy (its translator and support judge), the second judge of borderline
citations, and the generators (the agent behind a spec, with its rewrite model and its search).
Every model a translator, judge or rewrite calls is a `awarl.llm.text.TextModel`.

The service (`awarl.chat.manager.ThreadManager`) holds threads, workers and persistence; it asks
the wiring for parts and never reads a model setting itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from awarl.chat.config import ChatSettings
from awarl.chat.generate import AgentGenerator, ChatGenerator, GeneratorDown, rollout_of
from awarl.chat.loop import LoopSettings
from awarl.chat.prompts import Prompts
from awarl.chat.store import Store
from awarl.chat.validate import Corrections, Validator


class LazyGenerator:
    """A generator loaded on first use, so a server starts even when its model endpoint is down;
    a load failure is a retryable error of the call that needed it (and ends that thread in ERROR)."""

    def __init__(self, spec: str, load: Any, decisions: bool):
        self.name, self._load, self.decisions = spec, load, decisions
        self._gen: ChatGenerator | None = None
        self._lock = threading.Lock()

    def _get(self) -> ChatGenerator:
        with self._lock:
            if self._gen is None:
                self._gen = self._load(self.name)
            return self._gen

    def answer(self, question: str, temperature: float) -> Any:
        return self._get().answer(question, temperature)

    def rewrite(self, prompt: str) -> str:
        return self._get().rewrite(prompt)

    def close(self) -> None:
        if self._gen is not None and hasattr(self._gen, "close"):
            self._gen.close()


def openai_text_model(spec: str, what: str) -> Any:
    """The `TextModel` an ``openai:URL#MODEL`` spec names (``what`` names the setting in the error)."""
    from awarl.llm.spec import parse_spec
    from awarl.llm.text import TextModel

    parsed = parse_spec(spec)
    if parsed.kind != "openai" or not parsed.model:
        raise ValueError(f"{what} must be openai:URL#MODEL, got {spec!r}")
    return TextModel.openai(parsed.target, parsed.model)


class Wiring:
    """Settings → validators, judges, translators and generators (see the module docstring).

    ``generators`` are handed in by the embedding program (tests, scripts): served as given, by name.
    """

    def __init__(self, settings: ChatSettings, store: Store, generators: Mapping[str, ChatGenerator] | None = None):
        from awarl.verify.citations import load_corrections

        self.settings = s = settings
        self.prompts = Prompts(s.prompts_dir, max_questions=s.max_questions)
        self.loop_settings = LoopSettings(max_questions=s.max_questions, max_question_rounds=s.max_question_rounds,
                                          temperature=s.temperature, resample_feedback=s.resample_feedback,
                                          retries=s.retries, backoff_s=s.backoff_s)
        self.corrections = Corrections(load_corrections(s.corrections) if s.corrections else [], store.corrections)
        self.corpus = self._load_corpus()
        self._generators: dict[str, ChatGenerator] = dict(generators or {})
        self.given_generators = tuple(self._generators)
        self._gen_lock = threading.Lock()
        self._retriever: Any = None
        self._versions: dict[str, str] = {}
        for name in s.policies:  # every policy a user may switch to is read now: a broken file is named at start
            self.policy_version(name)
        self.second_judge = self._second_judge()

    def close(self) -> None:
        for gen in self._generators.values():
            if hasattr(gen, "close"):
                gen.close()

    # -- policies and validators -------------------------------------------------------------------
    def policy(self, name: str) -> Any:
        from awarl.verify.policy import load_policy

        return load_policy(self.settings.policies[name])

    def policy_version(self, name: str) -> str:
        if name not in self._versions:
            self._versions[name] = self.policy(name).version
        return self._versions[name]

    def validator(self, policy: str) -> Validator:
        """A fresh validator of ``policy`` (its own policy copy and Z3 context: one per worker)."""
        s = self.settings
        return Validator(s.policies[policy], translator=self._translator(), corpus=self.corpus,
                         corrections=self.corrections, judge=self._judge(), timeout_ms=s.check_timeout_ms)

    def _translator(self) -> Any:
        s = self.settings
        if s.translator != "llm":
            return None  # the validator's pattern translator
        from awarl.llm.text import TextModel
        from awarl.verify.translate import LLMTranslator

        if not s.llm_url or not s.llm_model:
            raise ValueError("translator: llm needs llm_url and llm_model")
        return LLMTranslator(TextModel.openai(s.llm_url, s.llm_model), samples=s.llm_samples)

    def _judge(self) -> Any:
        s = self.settings
        if s.judge == "none":
            return None
        if s.judge != "llm":
            return "lexical"
        from awarl.llm.text import TextModel
        from awarl.verify.citations import LLMSupportJudge

        return LLMSupportJudge(TextModel.openai(s.llm_url, s.llm_model))

    def _second_judge(self) -> Any:
        """The judge that cross-checks BORDERLINE citations before they are queued for review, or None."""
        spec = self.settings.second_judge
        if not spec:
            return None
        from awarl.verify.citations import LLMSupportJudge

        return LLMSupportJudge(openai_text_model(spec, "second_judge"))

    # -- corpus, search and generators -------------------------------------------------------------
    def _load_corpus(self) -> dict[str, Any] | None:
        if not self.settings.corpus:
            return None
        from awarl.data.records import load_corpus

        return {p.id: p for p in load_corpus(self.settings.corpus)}

    def allowed_generators(self) -> set[str]:
        """The specs this server may serve: its configured generator, the config's ``generators`` list, and
        generators handed in by the embedding program."""
        s = self.settings
        return {g for g in (s.generator, *s.generators, *self.given_generators) if g}

    def generator(self, spec: str) -> ChatGenerator:
        with self._gen_lock:
            if spec not in self._generators:
                self._generators[spec] = LazyGenerator(spec, self._load_generator, self.settings.uses_decisions(spec))
            return self._generators[spec]

    def _load_generator(self, spec: str) -> ChatGenerator:
        from awarl.llm.spec import load_backend, parse_spec

        s = self.settings
        try:
            backend = load_backend(spec, timeout=min(120.0, s.generation_timeout_s), max_retries=1)
            rewrite = load_backend(s.rewrite_generator, timeout=min(120.0, s.generation_timeout_s), max_retries=1) \
                if s.rewrite_generator else None
        except Exception as exc:
            raise GeneratorDown(f"could not load generator {spec!r}", detail=f"{type(exc).__name__}: {exc}") from exc
        parsed = parse_spec(spec)
        checkpoint = parsed.target if parsed.kind in ("hf", "vllm") else None
        return AgentGenerator(backend, self.retriever(), rollout_of(checkpoint, s.rollout), rewrite_backend=rewrite,
                              decisions=s.uses_decisions(spec), name=spec, timeout_s=s.generation_timeout_s,
                              max_batch=s.batch_size, window_s=s.batch_window_ms / 1000)

    def retriever(self) -> Any:
        """What the agent searches: ``index`` (a saved index folder or a retrieval server URL), else the
        corpus indexed with BM25 in memory — through the opener every stage uses."""
        if self._retriever is None:
            spec = self.settings.index or self.settings.corpus
            if not spec:
                raise GeneratorDown("the agent needs a corpus (or index) to search; set corpus: in the chat config")
            from awarl.search.client import open_retriever

            self._retriever = open_retriever(spec)
        return self._retriever
