"""`convert-hf`: Marian checkpoints built here become bundles whose parity with transformers is recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from export.bundle_writer import ExportError
from export.convert_hf import ConvertOptions, convert_hf
from service.engine.bundle import load_bundle
from tests.conftest import FIGURES, cli


def test_both_checkpoints_convert_with_parity_recorded(converted_bundles: Path) -> None:
    for name in ("en-de", "marian-en-zh"):
        m = load_bundle(converted_bundles / name).manifest
        p = m.parity
        assert p.passed and p.reference.startswith("transformers ")
        assert p.sentences >= 50
        assert p.token_ids_identical == p.strings_identical == p.beam_strings_identical == 1.0
        assert p.source_ids_identical == 1.0 and p.beam_size == 4
        assert p.max_abs_diff["decoder.log_probs"] <= 1e-4
        assert p.max_abs_diff["decoder.cross_attention"] <= 1e-4
        assert m.provenance.origin == "huggingface-marian"
        assert m.tokenizers.kind == "sentencepiece+vocab"
        FIGURES[f"convert-hf {name} parity"] = (
            f"{p.sentences} sentences, log-prob diff {p.max_abs_diff['decoder.log_probs']:.1e}, "
            f"attention diff {p.max_abs_diff['decoder.cross_attention']:.1e}"
        )


def test_the_manifest_records_what_the_checkpoint_says(converted_bundles: Path) -> None:
    de = load_bundle(converted_bundles / "en-de").manifest
    assert (de.source_lang, de.target_lang) == ("en", "de")
    assert de.tokenizers.target_token == ">>deu<<"
    assert de.tokenizers.source_vocab == de.tokenizers.target_vocab == "vocab.json"  # shared
    assert de.limits.max_source_tokens == de.limits.max_target_tokens == 64  # max_position_embeddings
    assert de.architecture.config["activation"] == "swish" and de.architecture.config["norm"] == "post"
    assert de.architecture.config["share_embeddings"] and de.architecture.config["tie_output"]
    search = de.search
    assert (search.beam_size, search.length_penalty, search.alpha) == (4, "power", 1.0)  # generation_config.json
    assert search.stopping == "transformers" and search.coverage_penalty == 0.0 and search.max_output_ratio is None
    assert search.forced_eos and search.renormalize and search.max_output_tokens == 63
    assert search.suppressed_ids == [de.special_ids.pad]  # bad_words_ids: pad is never generated
    assert de.special_ids.bos == de.special_ids.pad  # decoding starts from pad, as Marian does
    # no sample: the penultimate decoder layer's head mean (the tiny model has 2 layers)
    assert (de.attention_view.layer, de.attention_view.heads) == (0, "mean")
    assert "no --align-sample" in (de.attention_view.chosen_by or "")

    zh = load_bundle(converted_bundles / "marian-en-zh").manifest
    assert zh.tokenizers.target_vocab == "target_vocab.json" and zh.tokenizers.target_token is None
    assert zh.architecture.config["activation"] == "gelu" and not zh.architecture.config["share_embeddings"]
    assert not zh.architecture.config["tie_output"] and not zh.architecture.config["scale_embedding"]
    assert zh.search.alpha == 1.2 and not zh.search.renormalize
    view = zh.attention_view
    assert view.name_alignment_cases >= 5 and "--align-sample" in (view.chosen_by or "")
    assert view.name_alignment_accuracy == max(view.accuracy_by_view.values())
    assert {q.beam for q in zh.quality} == {1, 4} and all(q.split == "sample" for q in zh.quality)


@pytest.mark.slow
def test_int8_without_a_sample_is_scored_against_fp32(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "en-de-int8"
    result = cli(
        "convert-hf", marian_checkpoints["en-de"], "--out", out, "--source", "en", "--target", "de",
        "--target-token", ">>deu<<", "--int8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "parity with transformers" in result.stdout
    q = load_bundle(out).manifest.quantization
    assert q.mode == "int8" and q.bleu_reference == "fp32_output" and q.bleu_fp32 is None
    assert q.token_agreement is not None and q.bleu_int8 is not None and q.size_int8 < q.size_fp32  # type: ignore[operator]
    FIGURES["convert-hf en-de int8"] = f"token agreement {q.token_agreement:.2f}, BLEU vs fp32 {q.bleu_int8}"


@pytest.mark.slow
def test_no_repeat_ngram_size_is_served_as_transformers_does(
    marian_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = _copy(marian_checkpoints["en-de"], tmp_path)
    _edit_json(model / "generation_config.json", no_repeat_ngram_size=2)  # bans a lot: it shows if we differ
    bundle = convert_hf(model, tmp_path / "en-de-nr", ConvertOptions("en", "de", ">>deu<<"))
    assert bundle.manifest.search.no_repeat_ngram == 2
    assert bundle.manifest.parity.passed and bundle.manifest.parity.beam_strings_identical == 1.0


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / checkpoint.name))


def _edit_json(path: Path, **changes: object) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**doc, **changes}), encoding="utf-8")


def _refused(model_dir: Path, out: Path, options: ConvertOptions | None = None) -> str:
    with pytest.raises(ExportError) as info:
        convert_hf(model_dir, out, options or ConvertOptions("en", "zh"))
    assert not out.exists(), "nothing may be written at --out"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "no staging left behind"
    return str(info.value)


def test_a_directory_that_is_not_a_marian_checkpoint(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "config.json: missing" in _refused(empty, tmp_path / "out")
    bart = _copy(marian_checkpoints["en-zh"], tmp_path)
    _edit_json(bart / "config.json", model_type="bart")
    assert "model_type is 'bart'" in _refused(bart, tmp_path / "out")


@pytest.mark.parametrize(
    ("remove", "named"),
    [("source.spm", "source.spm: missing"), ("target_vocab.json", "target_vocab.json: missing")],
)
def test_missing_tokenizer_files_are_named(
    marian_checkpoints: dict[str, Path], tmp_path: Path, remove: str, named: str
) -> None:
    model = _copy(marian_checkpoints["en-zh"], tmp_path)
    (model / remove).unlink()
    assert named in _refused(model, tmp_path / "out")


def test_a_vocabulary_that_does_not_match_the_embedding(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    model = _copy(marian_checkpoints["en-zh"], tmp_path)
    vocab = json.loads((model / "vocab.json").read_text(encoding="utf-8"))
    del vocab["<pad>"]
    (model / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    message = _refused(model, tmp_path / "out")
    assert "vocab.json" in message and "vocab_size" in message and "embedding" in message


@pytest.mark.parametrize(
    ("file", "changes", "named"),
    [
        ("config.json", {"activation_function": "gelu_new"}, "activation_function 'gelu_new'"),
        ("config.json", {"normalize_before": True}, "normalize_before is True"),
        ("config.json", {"encoder_ffn_dim": 96}, "encoder_ffn_dim (96) differs from decoder_ffn_dim"),
        ("generation_config.json", {"repetition_penalty": 1.2}, "repetition_penalty is 1.2"),
        ("generation_config.json", {"do_sample": True}, "do_sample is True"),
        ("generation_config.json", {"bad_words_ids": [[5, 6]]}, "bad_words_ids has sequences of several tokens"),
    ],
)
def test_unsupported_options_are_refused_by_name(
    marian_checkpoints: dict[str, Path], tmp_path: Path, file: str, changes: dict[str, object], named: str
) -> None:
    model = _copy(marian_checkpoints["en-zh"], tmp_path)
    _edit_json(model / file, **changes)
    message = _refused(model, tmp_path / "out")
    assert named in message and file in message


def test_several_problems_are_reported_at_once(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    model = _copy(marian_checkpoints["en-zh"], tmp_path)
    _edit_json(model / "config.json", activation_function="tanh")
    (model / "target.spm").unlink()
    message = _refused(model, tmp_path / "out")
    assert "activation_function" in message and "target.spm: missing" in message


def test_an_unknown_target_token_lists_the_known_ones(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    message = _refused(marian_checkpoints["en-de"], tmp_path / "out", ConvertOptions("en", "de", ">>fra<<"))
    assert "--target-token '>>fra<<' is not in vocab.json" in message and ">>deu<<" in message


def test_unreadable_weights_are_named(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    model = _copy(marian_checkpoints["en-zh"], tmp_path)
    (model / "model.safetensors").write_bytes(b"not a safetensors file")
    assert "model.safetensors: transformers cannot load it" in _refused(model, tmp_path / "out")


def test_bad_language_codes_and_sample_lines_are_named(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    assert "--target 'Chinese!'" in _refused(
        marian_checkpoints["en-zh"], tmp_path / "o", ConvertOptions("en", "Chinese!")
    )
    sample = tmp_path / "sample.tsv"
    sample.write_text("Tom chases Jerry.\t汤姆追杰瑞。\nonly one column\n", encoding="utf-8")
    options = ConvertOptions("en", "zh", align_sample=sample)
    assert "line 2: expected source<TAB>target" in _refused(marian_checkpoints["en-zh"], tmp_path / "o", options)


@pytest.mark.slow
def test_an_existing_bundle_survives_unless_forced(
    marian_checkpoints: dict[str, Path], converted_bundles: Path, tmp_path: Path
) -> None:
    out = Path(shutil.copytree(converted_bundles / "en-de", tmp_path / "en-de"))
    before = (out / "manifest.json").read_bytes()
    args = ("convert-hf", marian_checkpoints["en-de"], "--out", out, "--source", "en", "--target", "de")
    refused = cli(*args, "--target-token", ">>deu<<")
    assert refused.returncode == 2 and "exists; pass --force" in refused.stderr
    assert (out / "manifest.json").read_bytes() == before
    broken = cli(*args, "--target-token", ">>nope<<", "--force")  # a failed conversion keeps it too
    assert broken.returncode == 2 and ">>nope<<" in broken.stderr
    assert (out / "manifest.json").read_bytes() == before
    forced = cli(*args, "--target-token", ">>deu<<", "--force", "--parity-sentences", "52")
    assert forced.returncode == 0, forced.stderr
    assert load_bundle(out).manifest.parity.sentences == 52


@pytest.mark.slow
def test_the_cli_translates_with_a_converted_bundle(converted_bundles: Path) -> None:
    result = cli("translate", "Tom chases Jerry.", "--model", "en-de", "--bundles", converted_bundles, "--attention")
    assert result.returncode == 0, result.stderr
    first, *rows = result.stdout.splitlines()
    assert first and rows and all(":" in row for row in rows)  # one line per target token: its top sources


def test_converted_bundles_are_not_imported_or_rescored(converted_bundles: Path) -> None:
    from export.bundle_import import BundleImportError, import_bundle
    from export.rescore import rescore_bundle
    from models.config import load_run_config
    from tests.conftest import TINY_CONFIG

    with pytest.raises(BundleImportError, match="converted"):
        import_bundle(converted_bundles / "en-de", load_run_config(TINY_CONFIG))
    with pytest.raises(ExportError, match="not en-de"):
        rescore_bundle(converted_bundles / "en-de")
