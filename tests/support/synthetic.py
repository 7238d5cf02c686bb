"""A tiny English–Chinese corpus built from a grammar, so tests never need the shared corpus."""

from __future__ import annotations

import itertools
from pathlib import Path

NAMES = {"Tom": "汤姆", "Mary": "玛丽", "John": "约翰", "Jerry": "杰瑞", "Alice": "爱丽丝", "Bob": "鲍勃"}
VERBS = {"chases": "追", "likes": "喜欢", "sees": "看见", "helps": "帮助", "calls": "叫"}
TIMES = {"": "", " today": "今天", " again": "又"}


def synthetic_pairs() -> list[tuple[str, str]]:
    """Sentences like ("Tom chases Jerry today.", "汤姆今天追杰瑞。"): 6 * 5 * 5 * 3 = 450 pairs."""
    pairs = []
    for (s_en, s_zh), (v_en, v_zh), (o_en, o_zh), (t_en, t_zh) in itertools.product(
        NAMES.items(), VERBS.items(), NAMES.items(), TIMES.items()
    ):
        if s_en != o_en:
            pairs.append((f"{s_en} {v_en} {o_en}{t_en}.", f"{s_zh}{t_zh}{v_zh}{o_zh}。"))
    return pairs


def write_corpus(path: Path, pairs: list[tuple[str, str]] | None = None) -> Path:
    """Write pairs as the project's TSV (English, Chinese, attribution)."""
    rows = pairs if pairs is not None else synthetic_pairs()
    lines = [f"{en}\t{zh}\tsynthetic test pair #{i}" for i, (en, zh) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
