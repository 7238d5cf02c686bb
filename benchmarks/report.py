"""Markdown tables from the benchmark's JSON, written between markers in a hand-written document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

START, END = "<!-- results:start -->", "<!-- results:end -->"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def fixed_table(results: dict[str, Any]) -> str:
    engines = list(results["fixed_length"][0]["engines"])
    header = ["cell"] + [f"{e} tok/s (setting)" for e in engines] + [f"{e} ÷ ct2" for e in engines if e != "ct2"]
    rows = []
    for row in results["fixed_length"]:
        es = row["engines"]
        cells = [f"{es[e]['tokens_per_s']:.0f} ({es[e]['setting']})" for e in engines]
        ratios = [_ratio(es[e]) for e in engines if e != "ct2"]
        rows.append([row["cell"], *cells, *ratios])
    return _table(header, rows)


def _ratio(engine: dict[str, Any]) -> str:
    """The median ratio to CTranslate2, with its range over the rounds."""
    rounds = engine.get("ratio_to_ct2_rounds") or []
    spread = f" ({min(rounds):.2f}–{max(rounds):.2f})" if len(rounds) > 1 else ""
    return f"{engine.get('ratio_to_ct2', float('nan')):.2f}{spread}"


def latency_table(results: dict[str, Any]) -> str:
    engines = list(results["fixed_length"][0]["engines"])
    rows = [
        [row["cell"]] + [f"{row['engines'][e]['ms_per_sentence']:.1f}" for e in engines]
        for row in results["fixed_length"]
        if "/b1/" in row["cell"]
    ]
    return _table(["cell (20 tokens)"] + [f"{e} ms/sentence" for e in engines], rows)


def real_table(results: dict[str, Any]) -> str:
    engines = list(results["real_data"][0]["engines"])
    ratios = all("ratio_to_ct2" in row for row in results["real_data"])
    rows = []
    for row in results["real_data"]:
        cells = [f"{row['engines'][e]['tokens_per_s']:.0f} / {row['engines'][e]['bleu']:.2f}" for e in engines]
        if ratios:
            r = row["ratio_to_ct2"]
            cells.append(f"{r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f})")
        rows.append([row["cell"], *cells])
    header = ["cell"] + [f"{e} tok/s / BLEU" for e in engines] + (["ort ÷ ct2 (rounds)"] if ratios else [])
    return _table(header, rows)


def roofline_table(results: dict[str, Any]) -> str:
    engines = list(results["fixed_length"][0]["engines"])
    rows = []
    for row in results["roofline"]:
        parts = [f"{row[e]['ms_per_step']:.2f} ({row[e]['fraction']:.0%})" for e in engines]
        rows.append([row["cell"], row["bound"], f"{row['bound_ms_per_step']:.2f}", *parts])
    return _table(["cell", "bound", "bound ms/step"] + [f"{e} ms/step (of bound)" for e in engines], rows)


def scaling_tables(results: dict[str, Any]) -> str:
    steps = results["step_ms_by_position"]
    step_table = _table(["position", *steps], [["ms/step (ort fp32, batch 1)", *[f"{v:.3f}" for v in steps.values()]]])
    by_len = results["tokens_per_s_by_source_length"]
    lengths = list(next(iter(by_len.values())))
    len_table = _table(["source tokens", *lengths], [[e, *[f"{by_len[e][n]:.0f}" for n in lengths]] for e in by_len])
    return step_table + "\n\n" + len_table


def rss_table(results: dict[str, Any]) -> str:
    rows = [[k, f"{v['peak']:.0f}", f"{v['interpreter']:.0f}"] for k, v in results["peak_rss_mb"].items()]
    return _table(["worker", "peak RSS MB", "interpreter MB"], rows)


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    parts = [
        f"Machine: fp32 GEMM {m['gemm_gflops']:.0f} GFLOP/s, copy bandwidth {m['bandwidth_gbs']:.1f} GB/s.",
        "### Fixed-length work (20 source tokens, 20 generated, EOS suppressed), median of rounds",
        fixed_table(results),
        "### Latency at batch 1",
        latency_table(results),
        "### Real test sentences (speed and BLEU)",
        real_table(results),
        "### Roofline",
        roofline_table(results),
        "### Scaling",
        scaling_tables(results),
        "### Peak RSS per worker process",
        rss_table(results),
    ]
    return "\n\n".join(parts)


def write_markdown(path: Path, results: dict[str, Any]) -> None:
    """Replace the section between the markers (or append one) with fresh tables."""
    text = path.read_text(encoding="utf-8") if path.exists() else f"# Benchmarks\n\n{START}\n{END}\n"
    if START not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{START}\n{render(results)}\n{END}{tail}", encoding="utf-8")
