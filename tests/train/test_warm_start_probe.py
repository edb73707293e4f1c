"""scripts/warm_start_probe.py on the tests' warm-started world agent: the two reading positions are
found in every gold conversation and the table's shares are measured, not assumed."""

from __future__ import annotations

import json
import re


def test_probe_reads_both_positions_of_the_test_world(tmp_path, test_world, tiny_world_sft_model_dir, capsys, load_script):
    from awarl.data.world import write_world

    script = load_script("warm_start_probe")
    demo = tmp_path / "demo"
    write_world(test_world, demo / "world")
    (demo / "sft").mkdir()
    (demo / "sft" / "rollout.json").write_text(json.dumps({"scope": "global", "topk": 3, "passage_words": 20,
                                                            "max_searches": 2, "max_completion_tokens": 320}))
    data = script.conversations(demo, 8)
    assert [len(data[s]) for s in ("sft", "eval")] == [8, 8]
    from transformers import AutoTokenizer

    from awarl.agent.env import tool_schema

    tok = AutoTokenizer.from_pretrained(tiny_world_sft_model_dir)
    for messages in data["eval"]:
        ids = tok(tok.apply_chat_template(messages, tools=[tool_schema()], tokenize=False))["input_ids"]
        found = script.key_positions(tok, ids)
        cited = re.findall(r"\[(\w+)\]", messages[-1]["content"])
        assert len(found["cite"]) == min(len(cited), 1) and len(found["cite2"]) == (len(cited) >= 2)
        for span, pid in zip(found["cite"] + found["cite2"], cited):  # each span holds exactly its id
            assert tok.decode([ids[q] for q in span]).strip().strip("[]") == pid
        assert len(found["answer"]) == 1 and len(found["city"]) == sum(
            '"country ' in json.dumps(m.get("tool_calls")) for m in messages)
        for (p,) in found["city"]:  # the token right after the query's "country" is a city the first result named
            assert tok.decode([ids[p]]).strip() in messages[3]["content"]
    assert script.main(["--demo", str(demo), "--n", "8", str(tiny_world_sft_model_dir)]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1]
    shares = [float(x) for x in re.findall(r"\| (\d\.\d\d)", row)]
    assert len(shares) == 8 and all(0.0 <= x <= 1.0 for x in shares)
    assert script.main(["--demo", str(tmp_path / "nowhere"), str(tiny_world_sft_model_dir)]) == 2


def test_entity_prior_gives_each_class_one_shared_direction(tmp_path):
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.data.world import WorldConfig, generate_world
    from awarl.train.tiny import WORLD_SHAPE, build_world_model

    world = generate_world(WorldConfig(version=2, persons=40, seed=0))
    cities = [c for c, level in world.levels.items() if level == "city"]

    def city_cosine(prior: float) -> float:
        folder = build_world_model(tmp_path / str(prior), world, dataclasses.replace(WORLD_SHAPE, entity_prior=prior))
        emb = AutoModelForCausalLM.from_pretrained(folder).get_input_embeddings().weight
        tok = AutoTokenizer.from_pretrained(folder)
        ids = [tok(f" {c}", add_special_tokens=False)["input_ids"] for c in cities]
        assert all(len(i) == 1 for i in ids)  # every city is one token
        v = emb.detach()[[i[0] for i in ids]]
        cos = torch.nn.functional.cosine_similarity(v[:, None], v[None], dim=-1)
        return float((cos.sum() - len(ids)) / (len(ids) * (len(ids) - 1)))

    assert abs(city_cosine(0.0)) < 0.05 and city_cosine(1.0) > 0.4


def test_passage_ids_are_one_token_or_hex_pieces_and_the_probe_spans_either(tmp_path, load_script):
    """``shape.whole_ids``: one added token per ``[passage id]`` (the default), or BPE pieces; the probe's
    cite span covers the whole id either way."""
    import dataclasses

    from transformers import AutoTokenizer

    from awarl.data.world import WorldConfig, generate_world
    from awarl.train.tiny import WORLD_SHAPE, build_world_model

    script = load_script("warm_start_probe")
    world = generate_world(WorldConfig(version=2, persons=40, seed=0))
    a, b = world.passages[3].id, world.passages[7].id
    text = f"<answer>Ruvia</answer> [{a}] [{b}]<|im_end|>"
    for whole in (True, False):
        tok = AutoTokenizer.from_pretrained(build_world_model(tmp_path / str(whole), world,
                                                              dataclasses.replace(WORLD_SHAPE, whole_ids=whole)))
        assert (len(tok.tokenize(f"[{a}]")) == 1) is whole
        ids = tok(text, add_special_tokens=False)["input_ids"]
        found = script.key_positions(tok, ids)
        assert [tok.decode([ids[q] for q in span]).strip().strip("[]") for span in found["cite"] + found["cite2"]] == [a, b]
