"""Frequent names and their usual Chinese forms: for name alignment accuracy and name augmentation."""

from __future__ import annotations

# English name -> Chinese forms (simplified first; traditional where the corpus uses them)
NAMES: dict[str, tuple[str, ...]] = {
    "Tom": ("汤姆", "湯姆"),
    "Mary": ("玛丽", "瑪麗", "瑪莉"),
    "John": ("约翰", "約翰"),
    "Alice": ("爱丽丝", "愛麗絲"),
    "Jerry": ("杰瑞",),
    "Bob": ("鲍勃",),
    "Jack": ("杰克", "傑克"),
}

# Names substituted into training pairs (name augmentation); the corpus itself has almost none
# of them, so without it the models cannot write them (e.g. "Tom chases Jerry." -> 杰瑞).
SUBSTITUTES: dict[str, str] = {
    "Jerry": "杰瑞",
    "Bob": "鲍勃",
    "Alice": "爱丽丝",
    "John": "约翰",
    "Jack": "杰克",
    "Lucy": "露西",
    "Mike": "迈克",
    "Kate": "凯特",
    "Paul": "保罗",
    "Emma": "艾玛",
}
