"""The results table (per category, their unweighted mean as BFCL's multi-turn paper reports it, and the mean over
tasks), pass@k with its standard error, labels, ``results.json`` with every transcript, a chart, and two runs
side by side."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seal_envs.evaluation.fingerprint import run_fingerprint
from seal_envs.evaluation.runner import EpisodeRecord

SUCCESS_COLOURS = ("#2ca02c", "#98df8a")  # pass, correct_abstention
FAILURE_COLOURS = ("#d62728", "#ff7f0e", "#e377c2", "#8c564b", "#bcbd22", "#ff9896", "#c49c94", "#f7b6d2",
                   "#ffbb78", "#9467bd")  # the agent's failures: warm colours, one each
FAULT_COLOURS = ("#7f7f7f", "#c7c7c7")  # not the agent's: the task's or our infrastructure's


def label_colours(labels: Sequence[str]) -> dict[str, str]:
    """A colour per turn label by what it means, in that order: greens for success, warm colours for the agent's
    failures, greys for task and infrastructure faults (a label gets the same colour in every chart)."""
    from seal_envs.diagnosis import FAILURE_LABELS, NON_AGENT_LABELS, Label

    groups = (([Label.PASS.value, Label.CORRECT_ABSTENTION.value], SUCCESS_COLOURS),
              ([l.value for l in Label if l in FAILURE_LABELS], FAILURE_COLOURS),
              (sorted(l.value for l in NON_AGENT_LABELS), FAULT_COLOURS))
    fixed = {name: colours[i % len(colours)] for names, colours in groups for i, name in enumerate(names)}
    order = list(fixed)  # success, failures, faults: a stacked chart keeps each group together
    ranked = sorted(labels, key=lambda label: (order.index(label) if label in fixed else len(order), label))
    return {label: fixed.get(label, "#1f77b4") for label in ranked}


CATEGORY_TITLES = {"base": "Base", "miss_func": "Miss Func", "miss_param": "Miss Param",
                   "long_context": "Long Context"}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` passed (Chen et al., 2021)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_ks(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, float]]:
    """pass@k (percent) for k = 1 and every power of two up to the samples per task, each with its standard error
    over tasks (the tasks are the sample; the spread of k samples within a task is already in the estimate)."""
    per_task: dict[str, list[bool]] = {}
    for record in records:
        per_task.setdefault(record.task_id, []).append(record.passed)
    if not per_task:
        return {}
    n = min(len(v) for v in per_task.values())
    ks = sorted({1, n, *(2 ** i for i in range(n.bit_length()) if 2 ** i <= n)})
    out = {}
    for k in ks:
        values = [100.0 * pass_at_k(len(v), sum(v), k) for v in per_task.values()]
        stderr = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
        out[str(k)] = {"value": statistics.fmean(values), "stderr": stderr}
    return out


def summarize(records: Sequence[EpisodeRecord], user: str | None = None) -> dict[str, Any]:
    """Success (percent) per category, their mean (macro, BFCL's "Average") and the mean over episodes (micro),
    pass@k, the turn-label distribution, fault counts, and who played the user (``user``, as reports name it)
    with how an LLM user's conversations ended."""
    by_category: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        by_category.setdefault(record.category, []).append(record)
    accuracy = {c: 100.0 * sum(r.passed for r in rs) / len(rs)
                for c, rs in sorted(by_category.items(), key=lambda kv: list(CATEGORY_TITLES).index(kv[0])
                                    if kv[0] in CATEGORY_TITLES else len(CATEGORY_TITLES))}
    labels = Counter(label for r in records for label in r.labels)
    checked = [r for r in records if r.official_valid is not None]
    tasks = {r.task_id for r in records}
    return {
        "tasks": len(tasks),
        "episodes": len(records),
        "samples": len(records) // len(tasks) if tasks else 0,
        "average": sum(accuracy.values()) / len(accuracy) if accuracy else 0.0,
        "micro_average": 100.0 * sum(r.passed for r in records) / len(records) if records else 0.0,
        "accuracy": accuracy,
        "counts": {c: len({r.task_id for r in rs}) for c, rs in by_category.items()},
        "pass_at_k": pass_at_ks(records),
        "labels": dict(labels.most_common()),
        "infrastructure_errors": sum(r.infrastructure_error for r in records),
        "task_errors": sum(r.task_error is not None for r in records),
        "official_agreement": (sum((r.official_valid is True) == r.passed for r in checked) / len(checked)
                               if checked else None),
        "official_checker": checked[0].official_checker if checked else None,
        "official_pass_rate": 100.0 * sum(r.official_valid is True for r in checked) / len(checked) if checked else None,
        "requests_sha256": run_fingerprint(r.requests_sha256 for r in records),
        "user": user,
        "terminations": dict(Counter(r.termination for r in records if r.termination).most_common()),
    }


def format_table(summary: dict[str, Any]) -> str:
    """The BFCL table in text: average first, then the categories that were run; both averages named; pass@k;
    then the labels."""
    columns = ["Average"] + [CATEGORY_TITLES.get(c, c) for c in summary["accuracy"]]
    values = [summary["average"], *summary["accuracy"].values()]
    width = max(len(c) for c in columns) + 2
    lines = ["".join(c.rjust(width) for c in columns), "".join(f"{v:.2f}".rjust(width) for v in values), ""]
    episodes = summary.get("episodes", summary["tasks"])
    lines.append(f"Average = {summary['average']:.2f}: the mean of the {len(summary['accuracy'])} categories (macro, "
                 f"as BFCL reports it); over all {episodes} episodes (micro): {summary.get('micro_average', 0.0):.2f}")
    for k, estimate in summary.get("pass_at_k", {}).items():
        lines.append(f"pass@{k}: {estimate['value']:.2f} ± {estimate['stderr']:.2f} (standard error over "
                     f"{summary['tasks']} tasks, {summary.get('samples', 1)} sample(s) each)")
    lines.append("")
    total = sum(summary["labels"].values()) or 1
    lines.append("turn labels:")
    lines += [f"  {label:<28}{count:>6}  {100 * count / total:6.2f}%" for label, count in summary["labels"].items()]
    lines.append(f"tasks: {summary['tasks']}  infrastructure errors: {summary['infrastructure_errors']}  "
                 f"task errors: {summary['task_errors']}")
    if summary.get("user"):
        lines.append(f"user: {summary['user']}")
    if summary.get("terminations"):
        lines.append("conversations ended by: " + ", ".join(f"{k} {v}" for k, v in summary["terminations"].items()))
    if summary.get("official_checker") == "tau2":
        lines.append(f"tau2's grading (DB + COMMUNICATE): {summary['official_pass_rate']:.2f}% pass; agreement with "
                     f"the env's reward: {100 * summary['official_agreement']:.2f}%")
    elif summary["official_agreement"] is not None:
        lines.append(f"agreement with BFCL's official checker: {100 * summary['official_agreement']:.2f}%")
    lines.append(f"eval-parity fingerprint (sha256 of every request sent): {summary['requests_sha256']}")
    return "\n".join(lines)


def format_transcript(record: EpisodeRecord, max_chars: int = 400) -> str:
    """One episode as a reader skims it: verdict and labels, then each message (long ones cut)."""
    head = (f"--- {record.task_id} (sample {record.sample}): {'PASS' if record.passed else 'FAIL'}, "
            f"labels {', '.join(record.labels) or '-'}")
    lines = [head]
    for message in record.messages:
        text = str(message.get("content") or "").strip().replace("\n", " ⏎ ")
        text = text if len(text) <= max_chars else text[:max_chars] + f" … ({len(text)} chars)"
        lines.append(f"  [{message.get('role')}] {text}")
    return "\n".join(lines)


def pick_transcripts(records: Sequence[EpisodeRecord], n: int) -> list[EpisodeRecord]:
    """A few episodes worth reading: failures first (with different labels when possible), then a pass."""
    failed = [r for r in records if not r.passed]
    chosen: list[EpisodeRecord] = []
    seen: set[tuple[str, ...]] = set()
    for record in failed:
        if tuple(record.labels) not in seen:
            seen.add(tuple(record.labels))
            chosen.append(record)
    chosen = chosen[: max(n - 1, 1)] if len(records) > len(failed) else chosen[:n]
    chosen += [r for r in records if r.passed][: n - len(chosen)]
    return chosen[:n]


def write_results(out_dir: Path, summary: dict[str, Any], records: Sequence[EpisodeRecord],
                  config: dict[str, Any], run: dict[str, str]) -> tuple[Path, Path]:
    """``results.json`` (run, config, summary, every episode with its transcript) and ``accuracy.png``: success
    per category and the turn-label distribution, titled with the policy's name, the benchmark and the date."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps({"run": run, "config": config, "summary": summary,
                                   "episodes": [r.to_json() for r in records]}, indent=1, default=str))
    names = ["Average\n(macro)", "All episodes\n(micro)"] + [f"{CATEGORY_TITLES.get(c, c)}\n(n={summary['counts'][c]})"
                                                           for c in summary["accuracy"]]
    values = [summary["average"], summary.get("micro_average", summary["average"]), *summary["accuracy"].values()]
    labels = list(summary["labels"].items())[::-1]
    total = sum(summary["labels"].values()) or 1
    fig, (left, right) = plt.subplots(1, 2, figsize=(1.3 * len(names) + 7, 4.2),
                                      gridspec_kw={"width_ratios": [len(names) + 1, 5]})
    bars = left.bar(names, values, color=["#444444", "#777777"] + ["#4c72b0"] * (len(names) - 2))
    left.bar_label(bars, fmt="%.1f")
    left.set_ylim(0, 108)
    left.set_ylabel("success (%)")
    left.set_title(f"success per category ({summary['tasks']} tasks)", fontsize=10)
    colours = label_colours([n for n, _ in labels])
    shares = right.barh([n for n, _ in labels], [100 * c / total for _, c in labels],
                        color=[colours[n] for n, _ in labels])
    right.bar_label(shares, fmt="%.1f%%", fontsize=8)
    right.set_xlim(0, 115)
    right.set_xlabel("share of turns (%)")
    right.set_title(f"turn labels ({total} turns): green success, warm agent failures, grey faults", fontsize=9)
    right.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"{run['name']} on {run['benchmark']} ({run['date'][:10]})")
    fig.tight_layout()
    chart = out_dir / "accuracy.png"
    fig.savefig(chart, dpi=120)
    plt.close(fig)
    return results, chart


def load_results(folder: Path) -> dict[str, Any]:
    """A run's ``results.json`` (given its folder or the file)."""
    file = folder / "results.json" if folder.is_dir() else folder
    if not file.is_file():
        raise ValueError(f"{folder}: no results.json (a folder written by seal-eval --out)")
    return json.loads(file.read_text())


def comparison_warnings(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Why two runs' numbers may not be comparable: another benchmark, other tasks, another sample count."""
    warnings = []
    bench_a, bench_b = a.get("run", {}).get("benchmark"), b.get("run", {}).get("benchmark")
    if bench_a != bench_b:
        warnings.append(f"WARNING: different benchmarks ({bench_a} vs {bench_b}): the success rates are not "
                        "comparable")
    tasks_a, tasks_b = {e["task_id"] for e in a["episodes"]}, {e["task_id"] for e in b["episodes"]}
    if tasks_a != tasks_b:
        warnings.append(f"WARNING: different tasks ({len(tasks_a)} vs {len(tasks_b)}, {len(tasks_a & tasks_b)} shared)")
    samples_a, samples_b = a["summary"].get("samples", 1), b["summary"].get("samples", 1)
    if samples_a != samples_b:
        warnings.append(f"WARNING: different samples per task ({samples_a} vs {samples_b})")
    return warnings


def format_comparison(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Two runs side by side: success overall and per category, label shares, and the tasks whose verdict
    differs (when the runs share tasks)."""
    def title(doc: dict[str, Any]) -> str:
        run = doc.get("run", {})
        return f"{run.get('name', doc['config'].get('policy'))} on {run.get('benchmark', '?')} ({run.get('date', '?')})"

    sa, sb = a["summary"], b["summary"]
    rows = [("tasks", sa["tasks"], sb["tasks"]), ("Average", sa["average"], sb["average"])]
    rows += [(CATEGORY_TITLES.get(c, c), sa["accuracy"].get(c), sb["accuracy"].get(c))
             for c in dict.fromkeys([*sa["accuracy"], *sb["accuracy"]])]
    ta, tb = sum(sa["labels"].values()) or 1, sum(sb["labels"].values()) or 1
    shares = [(label, 100 * sa["labels"].get(label, 0) / ta, 100 * sb["labels"].get(label, 0) / tb)
              for label in dict.fromkeys([*sa["labels"], *sb["labels"]])]

    def cell(value: Any) -> str:
        return "-" if value is None else str(value) if isinstance(value, int) else f"{value:.2f}"

    def line(name: str, x: Any, y: Any) -> str:
        delta = f"{y - x:+.2f}" if isinstance(x, float) and isinstance(y, float) else ""
        return f"  {name:<28}{cell(x):>10}{cell(y):>10}{delta:>10}"

    out = [f"A: {title(a)}", f"B: {title(b)}", *comparison_warnings(a, b), "",
           f"  {'success (%)':<28}{'A':>10}{'B':>10}{'B-A':>10}"]
    out += [line(*row) for row in rows]
    out += ["", f"  {'turn labels (% of turns)':<28}{'A':>10}{'B':>10}{'B-A':>10}"]
    out += [line(*row) for row in shares]
    passed_a = {(e["task_id"], e.get("sample", 0)): e["passed"] for e in a["episodes"]}
    passed_b = {(e["task_id"], e.get("sample", 0)): e["passed"] for e in b["episodes"]}
    shared = passed_a.keys() & passed_b.keys()
    gained = sorted(t[0] for t in shared if passed_b[t] and not passed_a[t])
    lost = sorted(t[0] for t in shared if passed_a[t] and not passed_b[t])
    out += ["", f"shared episodes: {len(shared)}; passed only in B: {len(gained)}; passed only in A: {len(lost)}"]
    out += [f"  only in B: {', '.join(gained[:10])}{' ...' if len(gained) > 10 else ''}"] if gained else []
    out += [f"  only in A: {', '.join(lost[:10])}{' ...' if len(lost) > 10 else ''}"] if lost else []
    return "\n".join(out)
