"""A tiny Qwen2-shaped model and tokenizer built offline, and a short warm start.

Tests, the README's first command and laptop demos need a model that runs in seconds on a CPU
and speaks the real protocol: Qwen2.5's chat template (the one TRL recognises for tool calls),
``<|im_end|>`` as end of turn, ``<tool_call>`` JSON. Nothing is downloaded: the byte-level BPE
tokenizer is trained here on the texts it will see, with Qwen2's own normaliser and
pre-tokeniser so that ``AutoTokenizer.from_pretrained`` rebuilds it identically on reload.

A randomly initialised model never calls the tool, so `warm_start_on_samples` runs a short
``awarl train sft`` on gold conversations before anything else uses it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
ANSWER_TOKENS = ["<answer>", "</answer>"]
"""Added as whole tokens: left to BPE, ``>`` merges into the next word (``>Ruvia``) and the model
has to learn every name twice."""


@dataclass(frozen=True)
class TinyShape:
    """Model size; the defaults build a ~0.5 M-parameter model that trains at a few steps/s on 2 cores."""

    vocab_size: int = 2048
    hidden_size: int = 96
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    entity_prior: float = 0.0
    """World models: each entity class (cities, countries, person names) shares one random direction of
    this size (relative to the embeddings' spread) in its tokens' initial embeddings, so attending to
    "a city in the result" is one direction to learn rather than one per city (0: off)."""
    whole_ids: bool = True
    """World models: each ``[passage id]`` is one added token (short trajectories; each id's embedding is
    trained only where that passage is shown). False: ids are cut by BPE into hex pieces shared by every
    id, so citing one means copying a few common tokens from the result."""


def protocol_texts() -> list[str]:
    """Strings the tokenizer must handle well whatever the corpus: the chat template's fixed text,
    the system prompt, the search tool's schema as the template renders it, tool calls."""
    from trl.chat_template_utils import qwen2_5_chat_template

    from awarl.agent.env import tool_schema
    from awarl.protocol import ABSTAIN_PHRASE, SYSTEM_PROMPT

    call = json.dumps({"name": "search", "arguments": {"query": "who wrote Hamlet"}})
    return [
        qwen2_5_chat_template,
        SYSTEM_PROMPT,
        f"<tool_call>\n{call}\n</tool_call>",
        f"<answer>{ABSTAIN_PHRASE}</answer>",
        json.dumps(tool_schema()),
        "You may call one or more functions to assist with the user query.",
    ] * 20


def build_tiny_model(out_dir: str | Path, texts: Iterable[str], shape: TinyShape = TinyShape(), seed: int = 0,
                     *, system_prompts: Sequence[str | None] = (None,), whole_tokens: Sequence[str] = (),
                     entity_classes: Sequence[Sequence[str]] = ()) -> Path:
    """Train a tokenizer on ``texts`` (plus the protocol's own strings), build a random tiny Qwen2
    model sized to it, and save both (with TRL's qwen2_5 chat template) to ``out_dir``.

    Speed: the chat template puts ~300 tokens of fixed text (the tool instructions and the search
    tool's JSON schema) before every question, and the tiny model spends most of its time on them.
    Each of those fixed texts, and each of ``system_prompts`` (None = the protocol's), becomes ONE
    added token, and so does each string of ``whole_tokens`` (e.g. passage ids, which byte-level BPE
    cuts into ~12 pieces). Added tokens are matched before BPE, so any other text tokenizes as before.
    """
    import torch
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
    from trl.chat_template_utils import qwen2_5_chat_template

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE())
    # Qwen2Tokenizer rebuilds exactly this pipeline from vocab + merges on reload.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = TOOL_TOKENS + ANSWER_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size - len(added),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # At encode time the added tokens cut the text first (``<answer>Ruvia`` -> ``<answer>``, ``Ruvia``);
    # cut the training text the same way, so BPE learns the pieces the model will really see.
    tok.train_from_iterator([_cut(t, added) for t in [*protocol_texts(), *texts]], trainer=trainer)
    # Qwen marks the tool tags as added, not special, so skip_special_tokens keeps them.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        padding_side="left",
        truncation_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=shape.max_position_embeddings,
    )
    hf_tok.chat_template = qwen2_5_chat_template  # byte-identical, so TRL's tool loop recognises it
    fixed = [*_fixed_prompt_texts(hf_tok, system_prompts), *whole_tokens]
    hf_tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in dict.fromkeys(fixed) if t])

    eos_id = hf_tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=((len(hf_tok) + 63) // 64) * 64,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=hf_tok.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    if shape.entity_prior and entity_classes:
        _entity_prior(model, hf_tok, entity_classes, shape.entity_prior)
    model.generation_config.eos_token_id = [eos_id, hf_tok.pad_token_id]
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    return out


def _entity_prior(model: Any, tokenizer: Any, classes: Sequence[Sequence[str]], scale: float) -> None:
    """Add one shared random direction per class to the input embeddings of its words' single tokens
    (with and without a leading space); ``scale`` times the embeddings' standard deviation per unit."""
    import torch

    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        std = float(emb.std())
        for words in classes:
            ids = set()
            for word in words:
                for form in (word, f" {word}"):
                    tokens = tokenizer(form, add_special_tokens=False)["input_ids"]
                    if len(tokens) == 1:
                        ids.add(tokens[0])
            if ids:
                direction = torch.randn(emb.shape[1]) * std * scale
                emb[sorted(ids)] += direction


def _fixed_prompt_texts(tokenizer: Any, system_prompts: Sequence[str | None]) -> list[str]:
    """The system prompts and the text the chat template wraps around them when the search tool is
    declared (tool instructions + schema), exactly as rendered."""
    from awarl.agent.env import tool_schema
    from awarl.protocol import SYSTEM_PROMPT

    out = []
    for prompt in system_prompts:
        prompt = SYSTEM_PROMPT if prompt is None else prompt
        rendered = tokenizer.apply_chat_template([{"role": "system", "content": prompt}, {"role": "user", "content": "?"}],
                                                 tools=[tool_schema()], tokenize=False)
        start = rendered.index(prompt) + len(prompt)
        out += [prompt, rendered[start: rendered.index("<|im_end|>", start)]]
    return out


def _cut(text: str, tokens: list[str]) -> str:
    for t in tokens:
        text = text.replace(t, "\n")
    return text


def sample_texts(samples_dir: str | Path) -> list[str]:
    """Questions, answers and passages of the official-format files found in ``samples_dir``."""
    from awarl.data.adapters import load_dataset_file

    texts: list[str] = []
    for dataset, path in _sample_files(Path(samples_dir)):
        records, passages = load_dataset_file(dataset, path)
        texts += [r.question for r in records] + [a for r in records for a in r.answers]
        texts += [f"{p.title}: {p.text}" for p in passages]
    return texts


def _sample_files(samples_dir: Path) -> list[tuple[str, Path]]:
    found = [
        ("hotpotqa", samples_dir / "hotpotqa_dev_distractor_sample.json"),
        ("2wiki", samples_dir / "2wikimultihopqa_dev_sample.json"),
        ("musique", samples_dir / "musique_ans_dev_sample.jsonl"),
        ("musique", samples_dir / "musique_full_train_sample.jsonl"),
    ]
    return [(d, p) for d, p in found if p.exists()]


def warm_start_on_samples(model_dir: str | Path, out_dir: str | Path, samples_dir: str | Path, *, steps: int = 300,
                          log: Callable[[str], None] | None = None) -> Path:
    """Warm-start the tiny model with ``awarl train sft`` (TRL SFTTrainer, assistant-only loss) on
    gold conversations of the shipped samples, so that it calls ``search`` and then answers with
    citations or abstains. Returns ``out_dir``."""
    import shutil
    import tempfile

    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl
    from awarl.train import sft
    from awarl.train.config import TrainConfig

    records, passages = [], {}
    for dataset, path in _sample_files(Path(samples_dir)):
        recs, pas = load_dataset_file(dataset, path)
        records += recs
        passages.update((p.id, p) for p in pas)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_jsonl(work / "records.jsonl", (r.to_dict() for r in records))
        write_jsonl(work / "corpus.jsonl", (p.to_dict() for p in passages.values()))
        config = TrainConfig.from_dict({
            "output_dir": str(work / "out"),
            "model": {"path": str(model_dir)},
            "data": {"records": str(work / "records.jsonl"), "corpus": str(work / "corpus.jsonl")},
            "rollout": {"scope": "closed", "topk": 2, "passage_words": 40},
            "sft": {"init_from": str(model_dir), "source": "gold", "abstain_share": 0.3, "args": {
                "max_steps": steps, "per_device_train_batch_size": 8, "learning_rate": 3e-3,
                "lr_scheduler_type": "cosine", "warmup_steps": 10, "use_cpu": True, "bf16": False,
                "disable_tqdm": True}},
            "logging": {"report_to": [], "summary": log is not None},
        })
        final = sft.main(config, output_dir=str(work / "sft"), on_log=log)
        shutil.copytree(final, out_dir, dirs_exist_ok=True)
    return Path(out_dir)


WORLD_SHAPE = TinyShape(vocab_size=1536, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
"""The synthetic world's model: 2 layers, 128 hidden (~0.4 M parameters). It learns the world's
two-search trajectories in ~1,000 SFT steps; smaller widths were not tried."""


def build_world_model(out_dir: str | Path, world, shape: TinyShape = WORLD_SHAPE, seed: int = 0,
                      system_prompt: str | None = None) -> Path:
    """`build_tiny_model` with a tokenizer trained on the world's own text (``awarl.data.world``):
    every name is one token and so is every cited ``[passage id]``, so a whole two-search trajectory
    is ~200 tokens."""
    from awarl.data.world import world_texts

    ids = [f"[{p.id}]" for p in world.passages]
    classes = [[place for place, level in world.levels.items() if level == kind] for kind in ("city", "country")]
    classes.append(sorted({part for p in world.persons for part in p.name.split()}))
    return build_tiny_model(out_dir, world_texts(world, system_prompt), shape, seed, system_prompts=[system_prompt],
                            whole_tokens=ids if shape.whole_ids else (), entity_classes=classes)


def world_trajectories(world, env_factory: Callable[[], object], splits: Iterable[str] = ("sft",),
                       system_prompt: str | None = None, first: str = "relation",
                       abstain_share: float = 1.0, renamed_copies: int = 0,
                       originals: bool = True, rename_ids: bool = False, clarified_share: float = 0.0,
                       misread_share: float = 0.0) -> list[dict]:
    """Gold conversations of the world's questions, searched with the real tool (``env_factory``
    builds the same `SearchEnv` the rollouts use, so SFT shows exactly what GRPO will see), as
    ``{"record_id", "messages"}`` rows that ``awarl train sft`` reads with ``sft.source: trajectories``.

    ``abstain_share``: the share of unanswerable questions whose conversation abstains (chosen per
    question, seeded by its id); the others answer with a guess from an irrelevant passage
    (`awarl.data.world.gold_conversation` ``guess``), like instruction data that never says "I don't
    know". Below 1, the warm-started agent's sampled rollouts sometimes guess where the corpus lacks
    the fact, and its answers on answerable questions are less sure (docs/benchmarks.md measures both).

    ``renamed_copies``: that many copies of each conversation follow it with its persons
    and cities renamed (`awarl.data.world.renamed_conversation`, seeded by the question id), so
    no person's city can be learned by heart and the warm start must learn to read the results;
    ``originals=False`` leaves the real conversations out (with them in, the tiny model still learns
    their persons' cities by heart before it learns to read); ``rename_ids`` renames the copies' passage
    ids too, so a cited id can only be copied from the results.

    ``clarified_share`` (world v2): that share of the answerable questions whose person has namesakes
    (chosen per question, seeded by its id) gets one more conversation (with its renamed copies): the
    question as the chatbot asks the agent again once the user has said which namesake is meant (its
    question `awarl.chat.prompts.which_one`, the user's reply the city, in
    `awarl.chat.prompts.Prompts.agent_question`'s format), then the search for that city's country and
    the answer (`awarl.data.world_v2.clarified_conversation_v2`). Without it the agent has never read a
    user's reply (docs/chat.md).

    ``misread_share``: that share of the conversations that answer an answerable question (chosen per
    conversation, seeded by the question's id) answer another of the world's countries instead, citing
    the same passages (`misread`): a noisy teacher. The warm start then learns to read (the other 1 −
    share of its answers are copied from the results) but answers right only about that often when
    sampled: a weak reader whose weakness is set by a share, not by where SFT stops on the copying
    transition (docs/fidelity.md, "T2's base"). 0 (the default) leaves every conversation as it was."""

    from awarl.data.world import Renamer, gold_conversation, record_id

    if not 0.0 <= abstain_share <= 1.0:
        raise ValueError(f"abstain_share must be in [0, 1], got {abstain_share}")
    if not originals and not renamed_copies:
        raise ValueError("originals=False needs renamed_copies >= 1 (there would be no conversations)")
    if renamed_copies < 0:
        raise ValueError(f"renamed_copies must be >= 0, got {renamed_copies}")
    if not 0.0 <= clarified_share <= 1.0:
        raise ValueError(f"clarified_share must be in [0, 1], got {clarified_share}")
    if not 0.0 <= misread_share <= 1.0:
        raise ValueError(f"misread_share must be in [0, 1], got {misread_share}")
    env = env_factory()
    rows = []
    rename = Renamer(world) if renamed_copies else None  # `awarl.data.world.renamed_conversation`, pools sorted once

    def add(q, messages: list[dict], copies_seed: str) -> None:
        if misread_share and q.answerable and random.Random(f"{copies_seed}/misread").random() < misread_share:
            messages = misread(world, messages, random.Random(f"{copies_seed}/misread/country"))
        if originals:
            rows.append({"record_id": record_id(q), "messages": messages})
        if renamed_copies:
            rng = random.Random(copies_seed)
            rows.extend({"record_id": record_id(q), "messages": rename(messages, rng, ids=rename_ids)}
                        for _ in range(renamed_copies))

    for split in splits:
        for q in world.split(split):
            env.reset(id=record_id(q), question=q.question, passages=[])
            guess = not q.answerable and random.Random(q.id).random() >= abstain_share
            add(q, gold_conversation(world, q, env.search, system_prompt, first=first, guess=guess), f"{q.id}/renamed")
            user = clarified_question(world, q) if clarified_share else None
            if user is not None and random.Random(f"{q.id}/clarified").random() < clarified_share:
                from awarl.agent.env import shown_text
                from awarl.data.world_v2 import asked_city, clarified_conversation_v2

                env.reset(id=record_id(q), question=user, passages=[])
                # the user names the city as this rollout's results show it (the world's name unless it draws names)
                add(q, clarified_conversation_v2(world, q, env.search, shown_text(env, user), system_prompt,
                                                 city=shown_text(env, asked_city(world, q))), f"{q.id}/clarified/renamed")
    return rows


def misread(world, messages: list[dict], rng: random.Random) -> list[dict]:
    """``messages`` with its final answer replaced by another of the world's countries (drawn by ``rng``),
    its citations kept: an agent that read the right passages and misreported them. A conversation that
    abstains is returned as it was."""
    from awarl.protocol import extract_answer, extract_citations, format_final, is_abstention

    final = str(messages[-1].get("content") or "")
    answer = extract_answer(final)
    if answer is None or is_abstention(answer):
        return [dict(m) for m in messages]
    others = sorted(place for place, level in world.levels.items() if level == "country" and place != answer)
    if not others:
        raise ValueError("misread needs a world with at least two countries")
    return [*(dict(m) for m in messages[:-1]),
            {**messages[-1], "content": format_final(rng.choice(others), extract_citations(final))}]


def clarified_question(world, q) -> str | None:
    """``q`` with the user's reply naming its person's city, as the chatbot asks the agent again after asking
    which namesake is meant; None for a question it does not ask that way (one person of that name,
    unanswerable, world v1)."""
    from awarl.chat.prompts import Prompts, which_one
    from awarl.chat.thread import Clarification
    from awarl.data.world_facts import VERBS
    from awarl.data.world_v2 import asked_city, namesake_cities

    if world.config.version != 2 or not q.answerable:
        return None
    cities = namesake_cities(world, q)
    if len(cities) < 2:
        return None
    asked = Clarification(which_one(q.person, VERBS[q.relation], cities), answer=asked_city(world, q))
    return Prompts().agent_question(q.question, [asked], "")


def warm_start_on_world(model_dir: str | Path, out_dir: str | Path, world, *, steps: int = 200,
                        samples_dir: str | Path | None = None, samples_weight: int = 1,
                        system_prompt: str | None = None, first: str = "question",
                        log: Callable[[str], None] | None = None) -> Path:
    """Warm-start a tiny model with ``awarl train sft`` on the gold two-search trajectories of a
    synthetic world (`awarl.data.world`): after ~100 steps it calls ``search``, searches again,
    and answers with citations or abstains. World trajectories are ~170 tokens, so this takes
    seconds where the shipped samples' ~900-token conversations took minutes. ``first="question"``
    (the default here) makes the first search the whole question. With ``samples_dir``, the gold
    conversations of the shipped samples join in (results cut to 20 words, so they are as short as
    the world's): a model trained on the world alone copies world names into its queries and finds
    nothing in HotpotQA, which the tests that run it on the samples need it to search."""
    import shutil
    import tempfile

    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl
    from awarl.data.world import write_world
    from awarl.search.bm25 import BM25Index
    from awarl.train import sft
    from awarl.train.config import TrainConfig

    rollout = RolloutSettings(system_prompt=system_prompt, scope="global", topk=3, passage_words=20, max_searches=2,
                              max_completion_tokens=320)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = write_world(world, work / "world")
        records, _ = load_dataset_file("musique", files["sft"])
        env = search_env_factory(BM25Index.build(world.passages), rollout)
        rows = world_trajectories(world, env, ("sft",), system_prompt, first)
        if samples_dir is not None:
            extra_records, extra_rows = _sample_conversations(Path(samples_dir), system_prompt)
            records, rows = records + extra_records, rows + extra_rows * samples_weight  # repeats weigh them up
        write_jsonl(work / "records.jsonl", (r.to_dict() for r in records))
        write_jsonl(work / "trajectories.jsonl", rows)
        config = TrainConfig.from_dict({
            "output_dir": str(work / "out"),
            "model": {"path": str(model_dir)},
            "data": {"records": str(work / "records.jsonl"), "corpus": str(files["corpus"])},
            "rollout": rollout.to_dict(),
            "sft": {"init_from": str(model_dir), "source": "trajectories", "trajectories": str(work / "trajectories.jsonl"),
                    "args": {"max_steps": steps, "per_device_train_batch_size": 8, "learning_rate": 3e-3,
                             "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 20, "use_cpu": True,
                             "bf16": False, "disable_tqdm": True}},
            "logging": {"report_to": [], "summary": log is not None},
        })
        final = sft.main(config, output_dir=str(work / "sft"), on_log=log)
        shutil.copytree(final, out_dir, dirs_exist_ok=True)
    return Path(out_dir)


def _sample_conversations(samples_dir: Path, system_prompt: str | None) -> tuple[list, list[dict]]:
    """Gold conversations of the shipped samples (search the question, cited answer or abstain) as
    ``{"record_id", "messages"}`` rows, with their records (ids made unique across files)."""
    from dataclasses import replace

    from awarl.data.adapters import load_dataset_file
    from awarl.train.sft import gold_conversations

    records, rows = [], []
    for dataset, path in _sample_files(samples_dir):
        recs, passages = load_dataset_file(dataset, path)
        by_id = {p.id: p for p in passages}
        for rec in recs:
            rec = replace(rec, id=f"{path.stem}:{rec.id}")
            data = gold_conversations([rec], by_id, topk=2, max_passage_words=20, system_prompt=system_prompt,
                                      abstain_share=0.0)
            if data.conversations:
                records.append(rec)
                rows.append({"record_id": rec.id, "messages": data.conversations[0]})
    return records, rows


def _main() -> None:
    """``python -m awarl.train.tiny --out DIR [--samples data/samples]``: build the random tiny model."""
    import argparse

    parser = argparse.ArgumentParser(description="Build a tiny offline Qwen2-shaped model and tokenizer.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--samples", default="data/samples", help="folder of official-format samples to train the tokenizer on")
    args = parser.parse_args()
    texts = sample_texts(args.samples)
    if not texts:
        parser.error(f"no sample files found in {args.samples}; point --samples at a folder of official-format "
                     "files (the repository's data/samples, or a prepared data set's originals)")
    print(f"tiny model -> {build_tiny_model(args.out, texts)}")


if __name__ == "__main__":
    _main()
