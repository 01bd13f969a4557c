"""The run's picture: training reward, held-out success and label shares per step, from ``seal_steps.jsonl``.

The trainer appends one JSON line per step (labels, weights, interface) and one per validation (held-out
success in eval mode); ``plot_run`` draws them into ``training.png`` in the run folder, and ``summary``
gives the figures ``seal-train`` prints at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from seal_envs.evaluation.report import label_colours


def read_log(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(steps, validations)`` records of a ``seal_steps.jsonl`` file."""
    steps, validations = [], []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            doc = json.loads(line)
            (validations if "validation" in doc else steps).append(doc)
    return steps, validations


def summary(path: str | Path) -> dict[str, Any]:
    steps, validations = read_log(path)
    return {"steps": len(steps),
            "reward": [s.get("reward_mean") for s in steps],
            "heldout": [(v["step"], v["validation"]["success"]) for v in validations]}


def plot_run(path: str | Path, out: str | Path, title: str = "") -> Path:
    """Draw reward / held-out success (top) and the training label shares (bottom) per step into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps, validations = read_log(path)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    xs = [s["step"] for s in steps]
    # two series that often coincide (both 0 early on): small filled circles under large hollow squares, values
    # written beside the held-out points, so neither hides the other
    top.plot(xs, [s.get("reward_mean") for s in steps], "o-", markersize=4, zorder=2,
             label="training reward (train interface)")
    vx, vy = [v["step"] for v in validations], [v["validation"]["success"] for v in validations]
    top.plot(vx, vy, "s--", markersize=10, markerfacecolor="none", markeredgewidth=1.5, zorder=3,
             label="held-out success (eval mode)")
    for x, y in zip(vx, vy):
        top.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(7, 6), fontsize=7)
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("success")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    colours = label_colours(sorted({k for s in steps for k in (s.get("labels") or {})}))
    labels = list(colours)
    bottom_acc = [0.0] * len(steps)
    for label in labels:
        share = [(s.get("labels") or {}).get(label, 0.0) for s in steps]
        bottom.bar(xs, share, bottom=bottom_acc, color=colours[label], label=label, width=0.6)
        bottom_acc = [a + b for a, b in zip(bottom_acc, share)]
    bottom.set_ylabel("share of training turns")
    bottom.set_xlabel("GRPO step")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    if labels:
        bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.suptitle(title or f"seal-train, {time.strftime('%Y-%m-%d')}", fontsize=10, wrap=True)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110, bbox_inches="tight")  # the label legend sits right of the axes
    plt.close(fig)
    return out


__all__ = ["plot_run", "read_log", "summary"]
