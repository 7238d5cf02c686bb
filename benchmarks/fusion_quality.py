"""What the decoder step's fused attentions (service/engine/attention_fusion.py) do to translations:
BLEU with and without them, how many translations change, and batch invariance with them.

    python -m benchmarks.fusion_quality [--bundles bundles/en-zh bundles/zh-en ...] [--sentences 200]

For each bundle, on the Tatoeba test split (default: every sentence): BLEU at beam 1 and 4 with the
attentions fused and as written, the translations that differ between the two, and, on
`--sentences` of them, the translations that change between alone and in mixed batches of 32 (fused).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from export.quantize import batching_changes
from models.data import Pair, default_corpus_path, read_corpus, split_corpus
from models.metrics import score
from service.engine.bundle import load_bundle
from service.engine.onnx_model import SessionConfig
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES

BEAMS = (1, 4)


def measure(bundle: Path, test: list[Pair], sentences: int) -> dict[str, Any]:
    """The figures for one bundle on the pairs `test`."""
    loaded = load_bundle(bundle)
    m = loaded.manifest
    sources, references = [p.text(m.source_lang) for p in test], [p.text(m.target_lang) for p in test]
    found: dict[str, Any] = {"bundle": str(bundle), "sentences": len(sources)}
    outputs: dict[bool, dict[int, list[str]]] = {}
    for fused in (True, False):
        translator = Translator(loaded, SessionConfig(intra_op_threads=1, fuse_attention=fused))
        if fused and "CacheAttention" not in translator.model.fused.get("decoder", {}):
            raise SystemExit(f"{bundle}: its decoder has no attentions to fuse")
        outputs[fused] = {b: translator.translate_texts(sources, translator.options(beam_size=b)) for b in BEAMS}
        bleu = {b: score(outputs[fused][b], references, m.target_lang)["bleu"] for b in BEAMS}
        found[f"bleu_{'fused' if fused else 'written'}"] = bleu
        if fused:
            ids = translator.source_ids(sources[:: max(1, len(sources) // sentences)][:sentences])
            changes = {b: batching_changes(translator, ids, b) for b in BEAMS}
            found["batching_changes_fused"] = {  # translations changed, of sentences; the largest score change
                b: [c.changed, c.sentences, c.max_score_diff] for b, c in changes.items()
            }
    found["differing_translations"] = {
        b: sum(x != y for x, y in zip(outputs[True][b], outputs[False][b], strict=True)) for b in BEAMS
    }
    print(json.dumps(found), flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundles", type=Path, nargs="+", default=[DEFAULT_BUNDLES / n for n in ("en-zh", "zh-en")])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    test = split_corpus(read_corpus(default_corpus_path()))["test"]
    results = [measure(b, test, args.sentences) for b in args.bundles]
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
