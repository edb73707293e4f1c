"""The demo's plots: refusal vs step (with the training target and P_t), the reward terms, the
held-out metrics before vs after RL, and refusal by p_i (through `awarl.eval.report.plot_calibration`,
the one refusal-by-p_i plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from awarl.eval.report import RefusalCurve, plot_calibration, pyplot


def write_plots(folder: Path, steps: list[dict[str, Any]], runs: dict[str, dict[str, Any]],
                by_p: dict[str, list[dict[str, Any]]], expected: float | None, reward: Any) -> dict[str, Path | None]:
    """Every plot of report.md into ``folder``; a plot with nothing to show is None."""
    return {
        "refusal": plot_refusal(steps, folder / "refusal_vs_step.png"),
        "rewards": plot_rewards(steps, folder / "reward_terms.png"),
        "before_after": plot_before_after(runs, expected, folder / "before_after.png"),
        "calibration": plot_refusal_by_p(by_p, reward, folder / "refusal_by_p.png"),
    }


def _series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(s["step"], float(s[key])) for s in steps if isinstance(s.get(key), (int, float))]
    return [x for x, _ in pts], [y for _, y in pts]


def _smooth(ys: list[float], w: int = 5) -> list[float]:
    return [sum(ys[max(0, i - w + 1): i + 1]) / len(ys[max(0, i - w + 1): i + 1]) for i in range(len(ys))]


def plot_refusal(steps: list[dict[str, Any]], path: Path) -> Path | None:
    """Batch refusal rate beside the expected rate, and the penalty P_t on its own axis."""
    if not steps:
        return None
    plt = pyplot()
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
    plt = pyplot()
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
    """The held-out metrics of each run as bars, with the expected refusal rate on the refusal bars."""
    plt = pyplot()
    keys = [("precision", "precision"), ("accuracy", "accuracy"), ("ra_f1", "RA-F1"), ("refusal_rate", "refusal"),
            ("abstain_recall", "abstain-recall\n(unanswerable)"), ("over_refusal", "over-refusal\n(answerable)")]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.38
    for j, (name, label, color) in enumerate((("sft", "before RL (SFT)", "tab:gray"),
                                              ("grpo", "after RL (GRPO, AWA)", "tab:blue"))):
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


def plot_refusal_by_p(by_p: dict[str, list[dict[str, Any]]], reward: Any, path: Path) -> Path | None:
    """Refusal share by p_i value, before and after RL, beside where refusing is the better bet."""
    from awarl.rewards.refusal import refusal_preferred

    if not any(by_p.values()):
        return None
    curves = [RefusalCurve(label, [(q["p"], q["refusal"], q["n"]) for q in by_p[name]], color, marker)
              for name, label, color, marker in (("before_rl", "before RL (SFT)", "tab:gray", "o"),
                                                 ("after_rl", "after RL (GRPO, AWA)", "tab:blue", "s"))]
    ps = sorted({q["p"] for pts in by_p.values() for q in pts})
    better = None
    if reward.kind == "awa" and ps:
        better = (ps, refusal_preferred(ps, reward.p_clip, reward.gamma, reward.r_correct, reward.r_wrong),
                  f"refusing is the better bet (gamma {reward.gamma})")
    return plot_calibration(curves, path, better_bet=better, counts=True,
                            xlabel="p_i of the SFT checkpoint (share of K sampled rollouts correct)",
                            title="Refusal by capability p_i (binned by value; n = held-out questions per value)")
