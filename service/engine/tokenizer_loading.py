"""A bundle's two tokenizers, of the kind its manifest names, with errors that name the bundle."""

from __future__ import annotations

from service.engine.bundle import Bundle, BundleInvalid
from service.engine.errors import TokenizerError
from service.engine.tokenizer import TextTokenizer, Tokenizer
from service.engine.vocab_tokenizer import VocabTokenizer


def load_tokenizers(bundle: Bundle) -> tuple[TextTokenizer, TextTokenizer]:
    """(source, target) tokenizers; a file that cannot be read is a BundleInvalid naming it."""
    m = bundle.manifest
    t = m.tokenizers
    try:
        if t.kind == "sentencepiece":
            return Tokenizer.from_file(bundle.file(t.source)), Tokenizer.from_file(bundle.file(t.target))
        assert t.source_vocab is not None and t.target_vocab is not None  # the manifest schema checks it
        special = m.special_ids
        specials = {special.eos, special.pad, special.bos}
        source = VocabTokenizer.from_files(bundle.file(t.source), bundle.file(t.source_vocab), specials, t.target_token)
        target = VocabTokenizer.from_files(bundle.file(t.target), bundle.file(t.target_vocab), specials)
    except TokenizerError as exc:
        raise BundleInvalid(bundle.path, [f"tokenizers: {exc.message}"]) from exc
    return source, target
