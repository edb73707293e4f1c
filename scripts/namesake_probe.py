"""A linear probe: does an agent's hidden state, where it starts its final reply, encode that the person
asked about has namesakes (several people of one name in the results)?

    python scripts/namesake_probe.py --demo runs/demo --model grpo/awa/final --run eval/awa \\
        [--train-run eval/awa-rlsplit] [--answered-only]

``--demo`` is a world-v2 demo folder; ``--model`` a checkpoint in it; ``--run`` an evaluation of that model
(``trajectories.jsonl``: the model's own greedy trajectories). Each answerable question whose trajectory
searched at least once and ends in a reply is one row. The model reads its own trajectory up to its final
reply (teacher-forced, rendered by the chat template the runner uses: `awarl.agent.runner.ChatTemplate`);
the feature is the last hidden state (after the final norm) at the position that predicts the reply's first
token; the label is whether the person has namesakes (``world.json``: ``cues.namesakes >= 2``).

The probe is an L2 logistic regression on standardized features with balanced class weights, scored by
balanced accuracy: 5-fold cross-validation over the run's questions (folds from a seeded shuffle), or, with
``--train-run``, fitted on that run's rows (e.g. the RL split's) and tested on ``--run``'s. ``--answered-only``
keeps the rows where the agent answered: the hidden state also carries what the agent is about to do, and an
agent that abstains more on namesake questions would let the action carry the label.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows_of(run: Path, questions: dict[str, dict], answered_only: bool) -> list[dict]:
    """The probe's rows of one evaluation run: answerable, searched, ended in a reply."""
    rows = []
    for line in (run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        t = json.loads(line)
        q = questions.get(t["record_id"].split("#")[0])
        if q is None or not t.get("answerable", True) or not t.get("queries"):
            continue
        last = t["messages"][-1] if t.get("messages") else {}
        if last.get("role") != "assistant" or last.get("tool_calls") or t.get("outcome") not in ("correct", "wrong", "abstain"):
            continue
        if answered_only and t["outcome"] == "abstain":
            continue
        rows.append({"id": q["id"], "question": t["question"], "messages": t["messages"][:-1],
                     "label": int(q["cues"]["namesakes"] >= 2), "outcome": t["outcome"]})
    return rows


def features(model_dir: Path, rows: list[dict], rollout, env):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.runner import ChatTemplate, env_tools
    from awarl.protocol import build_messages

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    template, tools = ChatTemplate(tokenizer), env_tools(env)
    out = []
    with torch.no_grad():
        for row in rows:
            ids = template.prompt_ids(build_messages(row["question"], rollout.prompt) + row["messages"], tools)
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]
            out.append(hidden[0, -1])
    return torch.stack(out)


def fit_predict(x_train, y_train, x_test):
    """L2 logistic regression (balanced class weights) on standardized features; predicted labels."""
    import torch

    mean, std = x_train.mean(0), x_train.std(0).clamp(min=1e-6)
    a, b = (x_train - mean) / std, (x_test - mean) / std
    y = y_train.float()
    pos = y.mean().clamp(1e-3, 1 - 1e-3)
    weight = torch.where(y > 0, 0.5 / pos, 0.5 / (1 - pos))
    w = torch.zeros(a.shape[1], requires_grad=True)
    c = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, c], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (weight * torch.nn.functional.binary_cross_entropy_with_logits(a @ w + c, y, reduction="none")).mean()
        loss = loss + 1e-2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return ((b @ w + c) > 0).long()


def balanced_accuracy(y, pred) -> float:
    recalls = [float((pred[y == k] == k).float().mean()) for k in (0, 1) if int((y == k).sum())]
    return sum(recalls) / len(recalls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, required=True)
    parser.add_argument("--model", required=True, help="checkpoint folder, relative to --demo")
    parser.add_argument("--run", required=True, help="evaluation folder of that model, relative to --demo")
    parser.add_argument("--train-run", help="fit on this evaluation folder's rows instead of cross-validating")
    parser.add_argument("--answered-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.records import load_corpus
    from awarl.search.bm25 import BM25Index

    demo = args.demo
    world = json.loads((demo / "world" / "world.json").read_text(encoding="utf-8"))
    questions = {q["id"]: q for q in world["questions"] if q["kind"] == "answerable"}
    # the run's rollout settings (its prompt); the tool only gives its schema (the results are the recorded ones)
    rollout = RolloutSettings.from_dict({**json.loads((demo / args.run / "run.json").read_text(encoding="utf-8"))["rollout"],
                                         "world_noise": None})
    env = search_env_factory(BM25Index.build(load_corpus(demo / "data" / "corpus.jsonl")), rollout)()
    test = rows_of(demo / args.run, questions, args.answered_only)
    x = features(demo / args.model, test, rollout, env)
    y = torch.tensor([r["label"] for r in test])
    if args.train_run:
        train = rows_of(demo / args.train_run, questions, args.answered_only)
        xt = features(demo / args.model, train, rollout, env)
        yt = torch.tensor([r["label"] for r in train])
        scores = [balanced_accuracy(y, fit_predict(xt, yt, x))]
        how = f"fitted on {args.train_run} ({len(train)} rows, {int(yt.sum())} with namesakes)"
    else:
        ids = sorted({r["id"] for r in test})
        random.Random(args.seed).shuffle(ids)
        fold = {qid: i % 5 for i, qid in enumerate(ids)}
        folds = torch.tensor([fold[r["id"]] for r in test])
        scores = []
        for k in range(5):
            held = folds == k
            scores.append(balanced_accuracy(y[held], fit_predict(x[~held], y[~held], x[held])))
        how = "5-fold cross-validation"
    mean = sum(scores) / len(scores)
    spread = (sum((s - mean) ** 2 for s in scores) / max(1, len(scores) - 1)) ** 0.5
    abstain = {k: sum(r["outcome"] == "abstain" for r in test if r["label"] == k) / max(1, sum(r["label"] == k for r in test))
               for k in (0, 1)}
    print(f"| {args.model} | {args.run}{' (answered only)' if args.answered_only else ''} | {len(test)} "
          f"({int(y.sum())} with namesakes) | {how} | {mean:.3f} ± {spread:.3f} | "
          f"{abstain[1]:.2f} / {abstain[0]:.2f} |")


if __name__ == "__main__":
    main()
