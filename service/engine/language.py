"""Which language a text is in, among the ones the loaded models read: by script, then by common words.

Script decides most cases (Chinese, Japanese, Korean, Cyrillic, Greek, Arabic... against Latin).
Between languages of one script, a few very common words break the tie; a language with no
entry in either table still works, as a Latin-script language without words. Add a language by
adding it to SCRIPTS (if not Latin) and, optionally, to COMMON_WORDS.
"""

from __future__ import annotations

import re
from collections import Counter

from service.engine.errors import FIELD, Subject
from service.engine.results import Detection, Notice
from service.engine.scripts import script_of

SCRIPTS: dict[str, frozenset[str]] = {
    "zh": frozenset({"CJK"}),
    "cmn": frozenset({"CJK"}),
    "zho": frozenset({"CJK"}),
    "yue": frozenset({"CJK"}),
    "ja": frozenset({"CJK", "HIRAGANA", "KATAKANA"}),
    "ko": frozenset({"HANGUL"}),
    "ru": frozenset({"CYRILLIC"}),
    "uk": frozenset({"CYRILLIC"}),
    "bg": frozenset({"CYRILLIC"}),
    "el": frozenset({"GREEK"}),
    "ar": frozenset({"ARABIC"}),
    "fa": frozenset({"ARABIC"}),
    "he": frozenset({"HEBREW"}),
    "hi": frozenset({"DEVANAGARI"}),
    "th": frozenset({"THAI"}),
}
LATIN = frozenset({"LATIN"})


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


COMMON_WORDS: dict[str, frozenset[str]] = {
    "en": _words("the and of to is in that it was for you he with on are as i this have be not"),
    "de": _words("der die und das ist nicht ich zu den von mit sich des ein eine auf für im dem auch"),
    "fr": _words("le la les et est un une des du que qui pas dans pour ce il je vous sur au"),
    "es": _words("el la los las y es un una que de en por con para no se lo su al"),
    "it": _words("il la le e è un una che di per non con sono del della lo gli si"),
    "pt": _words("o a os as e é um uma que de em para com não se do da no na"),
    "nl": _words("de het een en is van in dat niet op te zijn met voor die ik"),
}
WORD = re.compile(r"\w+")
DENSE = frozenset({"CJK", "HIRAGANA", "KATAKANA", "HANGUL"})
MIN_LETTERS = 3  # fewer letters than this (an ideograph counts 2) say too little to warn about


def base(lang: str) -> str:
    return re.split(r"[_-]", lang)[0].lower()


def scripts_of(lang: str) -> frozenset[str]:
    return SCRIPTS.get(base(lang), LATIN)


def _letters(text: str) -> Counter[str]:
    """Letters per script, an ideograph or syllable counting as two (it says as much as a short word)."""
    scripts = Counter(map(script_of, text))
    return Counter({s: n * 2 if s in DENSE else n for s, n in scripts.items() if s is not None})


def detect(text: str, candidates: list[str]) -> Detection | None:
    """The candidate language `text` is most likely in, with a 0..1 confidence; None if no letters."""
    letters = _letters(text)
    total = sum(letters.values())
    if not total or not candidates:
        return None
    share = {lang: sum(n for s, n in letters.items() if s in scripts_of(lang)) / total for lang in candidates}
    best = max(share.values())
    tied = [lang for lang in candidates if share[lang] == best]
    if len(tied) > 1:
        words = [w.lower() for w in WORD.findall(text)]
        hits = {lang: sum(w in COMMON_WORDS.get(base(lang), frozenset()) for w in words) for lang in tied}
        top = max(hits.values())
        tied = [lang for lang in tied if hits[lang] == top]
        best *= 1.0 if top and len(tied) == 1 else 0.5  # a script alone cannot tell Latin languages apart
    return Detection(tied[0], round(best, 3))


def mismatch(text: str, lang: str, subject: Subject) -> Notice | None:
    """A warning when `text` is clearly not written in `lang`'s script (e.g. Chinese sent as English)."""
    letters = _letters(text)
    total = sum(letters.values())
    if total < MIN_LETTERS:
        return None
    expected = scripts_of(lang)
    inside = sum(n for s, n in letters.items() if s in expected)
    if inside / total >= 0.5:
        return None
    found = letters.most_common(1)[0][0].lower()
    message = (
        f"{FIELD} is mostly {found} script, not what {lang} is written in: check the source language "
        '(or send "source": "auto"); the translation may be nonsense'
    )
    return Notice("language_mismatch", message, subject)
