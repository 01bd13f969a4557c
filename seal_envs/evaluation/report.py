"""BFCL's multi-turn table (per category and their unweighted mean, as in the paper), labels, JSON and a chart."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seal_envs.evaluation.fingerprint import run_fingerprint
from seal_envs.evaluation.runner import EpisodeRecord

CATEGORY_TITLES = {"base": "Base", "miss_func": "Miss Func", "miss_param": "Miss Param",
                   "long_context": "Long Context"}


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Accuracy (percent) per category and their mean, the turn-label distribution and fault counts."""
    by_category: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        by_category.setdefault(record.category, []).append(record)
    accuracy = {c: 100.0 * sum(r.passed for r in rs) / len(rs)
                for c, rs in sorted(by_category.items(), key=lambda kv: list(CATEGORY_TITLES).index(kv[0])
                                    if kv[0] in CATEGORY_TITLES else len(CATEGORY_TITLES))}
    labels = Counter(label for r in records for label in r.labels)
    checked = [r for r in records if r.official_valid is not None]
    return {
        "tasks": len(records),
        "average": sum(accuracy.values()) / len(accuracy) if accuracy else 0.0,
        "accuracy": accuracy,
        "counts": {c: len(rs) for c, rs in by_category.items()},
        "labels": dict(labels.most_common()),
        "infrastructure_errors": sum(r.infrastructure_error for r in records),
        "task_errors": sum(r.task_error is not None for r in records),
        "official_agreement": (sum((r.official_valid is True) == r.passed for r in checked) / len(checked)
                               if checked else None),
        "requests_sha256": run_fingerprint(r.requests_sha256 for r in records),
    }


def format_table(summary: dict[str, Any]) -> str:
    """The BFCL table in text: average first, then the categories that were run; then the labels."""
    columns = ["Average"] + [CATEGORY_TITLES.get(c, c) for c in summary["accuracy"]]
    values = [summary["average"], *summary["accuracy"].values()]
    width = max(len(c) for c in columns) + 2
    lines = ["".join(c.rjust(width) for c in columns), "".join(f"{v:.2f}".rjust(width) for v in values), ""]
    total = sum(summary["labels"].values()) or 1
    lines.append("turn labels:")
    lines += [f"  {label:<28}{count:>6}  {100 * count / total:6.2f}%" for label, count in summary["labels"].items()]
    lines.append(f"tasks: {summary['tasks']}  infrastructure errors: {summary['infrastructure_errors']}  "
                 f"task errors: {summary['task_errors']}")
    if summary["official_agreement"] is not None:
        lines.append(f"agreement with BFCL's official checker: {100 * summary['official_agreement']:.2f}%")
    lines.append(f"eval-parity fingerprint (sha256 of every request sent): {summary['requests_sha256']}")
    return "\n".join(lines)


def write_results(out_dir: Path, summary: dict[str, Any], records: Sequence[EpisodeRecord],
                  config: dict[str, Any]) -> tuple[Path, Path]:
    """``results.json`` (summary, config, every episode) and ``accuracy.png`` (bar chart of the table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps({"config": config, "summary": summary,
                                   "episodes": [r.to_json() for r in records]}, indent=1, default=str))
    names = ["Average"] + [CATEGORY_TITLES.get(c, c) for c in summary["accuracy"]]
    values = [summary["average"], *summary["accuracy"].values()]
    fig, ax = plt.subplots(figsize=(1.4 * len(names) + 2, 3.5))
    bars = ax.bar(names, values, color=["#444444"] + ["#4c72b0"] * (len(names) - 1))
    ax.bar_label(bars, fmt="%.2f")
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"BFCL V3 multi-turn ({summary['tasks']} tasks)")
    fig.tight_layout()
    chart = out_dir / "accuracy.png"
    fig.savefig(chart, dpi=120)
    plt.close(fig)
    return results, chart
