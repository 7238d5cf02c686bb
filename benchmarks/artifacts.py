"""The same weights in every engine's format, built once from a run's checkpoint and cached."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Artifacts:
    checkpoint: Path
    ort_fp32: Path  # bundle directories
    ort_int8: Path
    ct2: Path  # CTranslate2 model (fp32 on disk; int8 is its load-time compute type)

    def for_engine(self, kind: str, precision: str) -> str:
        if kind == "ort":
            return str(self.ort_int8 if precision == "int8" else self.ort_fp32)
        if kind == "ct2":
            return str(self.ct2)
        return str(self.checkpoint)


def build_artifacts(run: Path, work: Path) -> Artifacts:
    """Export the checkpoint as fp32 and int8 bundles and convert it for CTranslate2 (skips what exists)."""
    from benchmarks.ct2_convert import convert_checkpoint  # noqa: PLC0415
    from export.pipeline import ExportOptions, export_run  # noqa: PLC0415

    checkpoint = run / "best.pt"
    arts = Artifacts(checkpoint, work / "ort-fp32", work / "ort-int8", work / "ct2")
    options = {"quality_split": None, "alignment": False, "parity_sentences": 50}
    if not (arts.ort_fp32 / "manifest.json").is_file():
        export_run(run, arts.ort_fp32, ExportOptions(force=True, **options))  # type: ignore[arg-type]
    if not (arts.ort_int8 / "manifest.json").is_file():
        export_run(run, arts.ort_int8, ExportOptions(quantize="int8", force=True, **options))  # type: ignore[arg-type]
    if not (arts.ct2 / "model.bin").is_file():
        convert_checkpoint(checkpoint, arts.ct2)
    return arts
