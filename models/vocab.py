"""Training the SentencePiece tokenizers (one per language) on the training split.

The models carry the special ids that service.engine.tokenizer expects. Normalisation is left to
our own NFC step (`identity` rule), so offsets map exactly onto the text and Chinese full-width
punctuation survives detokenization.
"""

from __future__ import annotations

import io
import os

import sentencepiece as spm

from service.engine.text import normalize
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer

# Chinese has thousands of characters; keep nearly all of them in the vocabulary.
CHARACTER_COVERAGE = {"en": 1.0, "zh": 0.9995}


def train_tokenizer(texts: list[str], lang: str, vocab_size: int) -> Tokenizer:
    """A unigram SentencePiece model of at most `vocab_size` pieces trained on `texts`."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([normalize(t) for t in texts]),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # tiny corpora cannot fill a large vocabulary; take what there is
        character_coverage=CHARACTER_COVERAGE[lang],
        normalization_rule_name="identity",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )
    return Tokenizer(model.getvalue())
