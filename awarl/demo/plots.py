"""The demo's plots: refusal vs step (with the training target and P_t), the reward terms, the
held-out metrics before vs after RL, and refusal by p_i (through `awarl.eval.report.plot_calibration`,
the one refusal-by-p_i plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from awarl.eval.report import RefusalCurve, plot_calibration, pyplot


COLORS = ("tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink")
"""One colour per arm, in the recipe's order (before RL is grey)."""


def write_plots(folder: Path, steps: dict[str, list[dict[str, Any]]], m: dict[str, Any]) -> dict[str, Path | None]:
    """Every plot of report.md into ``folder``, from each arm's GRPO log (``steps``) and the metrics; a plot
    with nothing to show is None."""
    return {
        "refusal": plot_refusal(steps, m["arms"], folder / "refusal_vs_step.png"),
        "rewards": plot_rewards(steps, folder / "reward_terms.png"),
        "before_after": plot_before_after(m, folder / "before_after.png"),
        "calibration": plot_refusal_by_p(m, folder / "refusal_by_p.png"),
    }


def _series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(s["step"], float(s[key])) for s in steps if isinstance(s.get(key), (int, float))]
    return [x for x, _ in pts], [y for _, y in pts]


def _smooth(ys: list[float], w: int = 5) -> list[float]:
    return [sum(ys[max(0, i - w + 1): i + 1]) / len(ys[max(0, i - w + 1): i + 1]) for i in range(len(ys))]


def plot_refusal(steps: dict[str, list[dict[str, Any]]], arms: dict[str, dict[str, Any]], path: Path) -> Path | None:
    """Each arm's batch refusal rate; beside an AWA arm's, its training target (the expected rate from p_i)
    and its penalty P_t on the right axis."""
    if not any(steps.values()):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax2 = ax.twinx()
    penalties: list[float] = []
    for (name, log), color in zip(steps.items(), COLORS):
        kind = arms[name]["reward"]["kind"]
        x, y = _series(log, "awa/refusal_rate")
        ax.plot(x, y, color=color, alpha=0.25, lw=1)
        ax.plot(x, _smooth(y), color=color, lw=2, label=f"{name}: batch refusal rate (5-step mean)")
        if kind != "awa":
            continue
        x, y = _series(log, "awa/expected_refusal_rate")
        ax.plot(x, _smooth(y), color=color, lw=1.5, ls="--", label=f"{name}: training target (expected rate)")
        x, y = _series(log, "awa/penalty")
        ax2.plot(x, y, color=color, lw=1, ls=":", label=f"{name}: penalty P_t (right axis)")
        penalties += y
    ax.set_xlabel("GRPO optimizer step")
    ax.set_ylabel("share of rollouts")
    ax.set_ylim(0, 1)
    ax2.axhline(0, color="gray", lw=0.5, ls=":")
    ax2.set_ylabel("penalty P_t")
    lim = max([abs(v) for v in penalties] + [0.2]) * 1.2
    ax2.set_ylim(-lim, lim)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=7)
    ax.set_title("GRPO per arm: batch refusal rate, the AWA training target and its penalty P_t", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_rewards(steps: dict[str, list[dict[str, Any]]], path: Path) -> Path | None:
    """Each arm's total reward per step and its batch accuracy and precision."""
    if not any(steps.values()):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (name, log), color in zip(steps.items(), COLORS):
        for key, label, style in (("reward", "total reward", "-"), ("awa/accuracy", "batch accuracy", "--"),
                                  ("awa/precision", "batch precision", ":")):
            x, y = _series(log, key)
            if x:
                ax.plot(x, _smooth(y), color=color, ls=style, lw=2 if key == "reward" else 1.2, label=f"{name}: {label}")
    ax.set_xlabel("GRPO optimizer step")
    ax.set_ylabel("mean over the batch (5-step mean)")
    ax.legend(fontsize=7)
    ax.set_title("Reward and batch accuracy / precision during GRPO, per arm")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_before_after(m: dict[str, Any], path: Path) -> Path:
    """The held-out metrics before RL and after RL per arm as bars, with the AWA training targets on the
    refusal bars."""
    plt = pyplot()
    keys = [("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1"), ("refusal_rate", "refusal"),
            ("abstain_recall", "abstain-recall\n(unanswerable)"), ("over_refusal", "over-refusal\n(answerable)")]
    runs = [("before RL (SFT)", m["before_rl"], "tab:gray")] + [
        (f"after RL: {name} ({arm['reward']['kind']})", arm["after_rl"], color)
        for (name, arm), color in zip(m["arms"].items(), COLORS)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(runs)
    for j, (label, run, color) in enumerate(runs):
        vals = [run.get(k) or 0.0 for k, _ in keys]
        xs = [i + (j - (len(runs) - 1) / 2) * width for i in range(len(keys))]
        bars = ax.bar(xs, vals, width, label=label, color=color)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", fontsize=6)
    i = [k for k, _ in keys].index("refusal_rate")
    for name, arm in m["arms"].items():
        if arm["expected_refusal"] is not None:
            e = arm["expected_refusal"]
            ax.plot([i - 0.45, i + 0.45], [e, e], color="tab:green", ls="--", lw=2,
                    label=f"{name}: training target ({e:.2f})")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([label for _, label in keys], fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=7)
    ax.set_title("Held-out questions: before RL and after RL per arm (greedy)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_refusal_by_p(m: dict[str, Any], path: Path) -> Path | None:
    """Refusal share by p_i value, before RL and after RL per arm, beside where the first AWA arm's reward
    makes refusing the better bet."""
    from awarl.rewards.refusal import refusal_preferred

    by_p = {"before_rl": m["before_rl_refusal_by_p"], **{n: a["refusal_by_p"] for n, a in m["arms"].items()}}
    if not any(by_p.values()):
        return None
    curves = [RefusalCurve("before RL (SFT)", [(q["p"], q["refusal"], q["n"]) for q in by_p["before_rl"]], "tab:gray")]
    curves += [RefusalCurve(f"after RL: {name} ({arm['reward']['kind']})",
                            [(q["p"], q["refusal"], q["n"]) for q in arm["refusal_by_p"]], color, "s")
               for (name, arm), color in zip(m["arms"].items(), COLORS)]
    ps = sorted({q["p"] for pts in by_p.values() for q in pts})
    awa = [arm["reward"] for arm in m["arms"].values() if arm["reward"]["kind"] == "awa"]
    better = None
    if awa and ps:
        r = awa[0]
        better = (ps, refusal_preferred(ps, r["p_clip"], r["gamma"], r["r_correct"], r["r_wrong"]),
                  f"refusing is the better bet (AWA, gamma {r['gamma']})")
    return plot_calibration(curves, path, better_bet=better, counts=True,
                            xlabel="p_i of the SFT checkpoint (share of K sampled rollouts correct)",
                            title="Refusal by capability p_i (binned by value; n = held-out questions per value)")
