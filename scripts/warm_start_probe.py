"""Does a warm start read its search results, or remember its SFT facts? A probe of SFT checkpoints.

    python scripts/warm_start_probe.py --demo runs/demo runs/demo/sft/checkpoint-300 runs/demo/sft/final
    python scripts/warm_start_probe.py --demo runs/demo --n 80 --peek 3 runs/demo/sft/final

For each checkpoint, teacher-forced on the gold conversations of SFT and held-out questions of the
demo's world (searched with the real tool, as SFT saw them), the share of positions where the
checkpoint's most likely next token is the gold one, at the two tokens that need reading:

- ``city``: the city written into the second query ("country <city>"), which only the first search
  result names. A checkpoint that learned the SFT persons' cities by heart scores high on SFT and
  0 on held-out; one that reads scores alike on both (below 1 where namesakes make the gold city
  one of several the result shows);
- ``answer``: the first token of the final answer (the country the second result states, or the
  abstain phrase);
- ``cite``: the first cited passage id after the answer (the person's passage, which only the first
  result shows; abstentions cite nothing);
- ``cite2``: the second cited id (the city's country passage, rank 1 of the second result).

An id counts as right when every one of its tokens is the most likely one (an id is one token with the
world model's default ``shape.whole_ids``, about eleven hex pieces without it).

Seconds per checkpoint on a CPU, where a greedy evaluation of the same questions takes minutes.
``--peek N`` prints the context and the top-5 next tokens at N held-out city positions: the same
five everywhere means the checkpoint ignores the result and writes its prior.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def key_positions(tokenizer, ids: list[int]) -> dict[str, list[list[int]]]:
    """Token positions to predict: the token after ``"country`` in a tool call's query (``city``), the one
    after ``<answer>`` (``answer``), and the tokens of the first and second passage ids cited after
    ``</answer>`` (``cite``, ``cite2``; an id's pieces up to its closing bracket)."""
    pieces = [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(ids)]
    out: dict[str, list[list[int]]] = {"city": [], "answer": [], "cite": [], "cite2": []}
    i = 1
    while i < len(pieces) - 1:
        if pieces[i].strip() == "country" and pieces[i - 1].endswith('"'):
            out["city"].append([i + 1])
        elif pieces[i] == "<answer>":
            out["answer"].append([i + 1])
        elif pieces[i] == "</answer>":
            j, cited = i + 1, 0
            while j < len(pieces) and cited < 2 and (not pieces[j].strip() or pieces[j].strip().startswith("[")):
                if not pieces[j].strip():  # the space before an id, a token of its own
                    j += 1
                    continue
                end = next((k for k in range(j, len(pieces)) if "]" in pieces[k]), j)
                start = j + 1 if pieces[j].strip() == "[" else j  # a lone bracket is not part of the id
                out["cite" if cited == 0 else "cite2"].append(list(range(start, end + 1)))
                j, cited = end + 1, cited + 1
            i = j
            continue
        i += 1
    return out


def conversations(demo: Path, n: int) -> dict[str, list[list[dict]]]:
    """The first ``n`` gold conversations of the SFT and held-out splits of the demo's world."""
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.world import WorldConfig, generate_world
    from awarl.search.bm25 import BM25Index
    from awarl.train.tiny import world_trajectories

    world = generate_world(WorldConfig.from_dict(json.loads((demo / "world" / "world.json").read_text())["config"],
                                                 f"{demo}/world/world.json"))
    rollout = json.loads((demo / "sft" / "rollout.json").read_text(encoding="utf-8"))
    if rollout.get("world_noise") and not Path(rollout["world_noise"]).is_absolute():
        rollout["world_noise"] = str(demo / rollout["world_noise"])
    settings = RolloutSettings.from_dict(rollout, f"{demo}/sft/rollout.json")
    env = search_env_factory(BM25Index.build(world.passages), settings)
    return {split: [row["messages"] for row in world_trajectories(world, env, (split,), settings.system_prompt)[:n]]
            for split in ("sft", "eval")}


def probe(checkpoint: Path, data: dict[str, list[list[dict]]], peek: int = 0) -> dict[str, dict[str, float]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.env import tool_schema

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    out = {}
    for split, convs in data.items():
        hits = {"city": [0, 0], "answer": [0, 0], "cite": [0, 0], "cite2": [0, 0]}
        for messages in convs:
            ids = tokenizer(tokenizer.apply_chat_template(messages, tools=[tool_schema()], tokenize=False))["input_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0]
            predicted = logits.argmax(-1).tolist()  # the most likely next token after each position
            for key, spans in key_positions(tokenizer, ids).items():
                for span in spans:
                    p = span[0]
                    hits[key][0] += int(all(predicted[q - 1] == ids[q] for q in span))
                    hits[key][1] += 1
                    if key == "city" and split == "eval" and peek > 0:
                        peek -= 1
                        top = logits[p - 1].softmax(-1).topk(5)
                        print("  context:", tokenizer.decode(ids[max(0, p - 48):p]).replace("\n", " | ")[-240:])
                        print("  gold:", tokenizer.decode([ids[p]]), "| top 5:", ", ".join(
                            f"{tokenizer.decode([i])} {v:.3f}" for v, i in zip(top.values.tolist(), top.indices.tolist())))
        out[split] = {key: a / b if b else float("nan") for key, (a, b) in hits.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, required=True, help="demo folder (its world, and sft/rollout.json)")
    parser.add_argument("--n", type=int, default=150, help="gold conversations per split")
    parser.add_argument("--peek", type=int, default=0, help="print the top-5 tokens at this many held-out cities")
    parser.add_argument("checkpoints", type=Path, nargs="+", help="SFT checkpoints (folders with config.json)")
    args = parser.parse_args(argv)
    for path in [args.demo / "world" / "world.json", args.demo / "sft" / "rollout.json"]:
        if not path.is_file():
            print(f"error: {path}: not found (run `awarl demo --until sft --out {args.demo}` first)", file=sys.stderr)
            return 2
    data = conversations(args.demo, args.n)
    keys = ("city", "answer", "cite", "cite2")
    print("| checkpoint | " + " | ".join(f"{k} (SFT) | {k} (held-out)" for k in keys) + " |\n|---|" + "---|" * (2 * len(keys)))
    for checkpoint in args.checkpoints:
        got = probe(checkpoint, data, args.peek)
        print(f"| {checkpoint.name} | " + " | ".join(f"{got['sft'][k]:.2f} | {got['eval'][k]:.2f}" for k in keys) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
