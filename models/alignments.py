"""Word alignments of the training pairs, for guided attention (Garg et al. 2019; Marian's
`--guided-alignment`).

eflomal aligns the token ids the model itself reads and writes (SentencePiece pieces, EOS
included), so a link (s, t) means "target token t should attend to source token s", with no
mapping from words to pieces. Pieces of a 6k vocabulary are words or short word parts on the
English side and one to three characters on the Chinese side: the granularity the attention works
at. Both directions are aligned and symmetrised by grow-diag (the intersection, grown by
neighbouring links of the union), the usual choice for guided alignment: precise, yet it still
links most content words. The EOS tokens are linked to each other, as Marian does.

Results are cached by a hash of the token ids, so a resumed or repeated run aligns once.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

Link = tuple[int, int]  # (source position, target position)
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


class AlignmentError(RuntimeError):
    """The aligner failed."""


def _lines(sequences: Sequence[Sequence[int]]) -> list[str]:
    # Without EOS: it is linked by rule, and would otherwise pull every sentence's last piece.
    return [" ".join(str(i) for i in seq[:-1]) or "0" for seq in sequences]


def _read_links(path: Path) -> list[set[Link]]:
    links = []
    for line in path.read_text(encoding="utf-8").splitlines():
        pairs = (item.split("-") for item in line.split())
        links.append({(int(s), int(t)) for s, t in pairs})
    return links


def grow_diag(forward: set[Link], backward: set[Link]) -> set[Link]:
    """Koehn's grow-diag: start from the intersection, add union links next to an accepted link
    whose source or target position is still unaligned, until nothing changes."""
    union = forward | backward
    links = forward & backward
    sources, targets = {s for s, _ in links}, {t for _, t in links}
    added = True
    while added:
        added = False
        for s, t in sorted(links):
            for ds, dt in NEIGHBOURS:
                a, b = cand = (s + ds, t + dt)
                if cand in union and cand not in links and (a not in sources or b not in targets):
                    links.add(cand)
                    sources.add(a)
                    targets.add(b)
                    added = True
    return links


def symmetrised(src: list[str], tgt: list[str], samplers: int = 3) -> list[set[Link]]:
    """eflomal links between the space-separated tokens of each line pair, both directions joined
    by grow-diag. More samplers (eflomal's default is 3) give steadier links; it has no seed."""
    import eflomal  # noqa: PLC0415  # not at the top: a run whose alignments are cached trains without it

    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd.links", Path(tmp) / "rev.links"
        aligner = eflomal.Aligner(n_samplers=samplers)
        aligner.align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True)
        forward, backward = _read_links(fwd), _read_links(rev)
    if len(forward) != len(src) or len(backward) != len(src):
        raise AlignmentError(f"eflomal returned {len(forward)}/{len(backward)} link lines for {len(src)} pairs")
    return [grow_diag(f, b) for f, b in zip(forward, backward, strict=True)]


def align(
    src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], cache_dir: Path | None = None
) -> list[list[Link]]:
    """One sorted link list per pair; positions index `src_ids[i]` and `tgt_ids[i]` (EOS last)."""
    src, tgt = _lines(src_ids), _lines(tgt_ids)
    key = hashlib.sha256(json.dumps([src, tgt]).encode("utf-8")).hexdigest()[:16]
    cached = cache_dir / f"alignments-{key}.json" if cache_dir else None
    if cached is not None and cached.is_file():
        result: list[list[Link]] = [[(s, t) for s, t in pair] for pair in json.loads(cached.read_text())]
        return result
    result = []
    for pair, s, t in zip(symmetrised(src, tgt), src_ids, tgt_ids, strict=True):
        links = {(a, b) for a, b in pair if a < len(s) - 1 and b < len(t) - 1}
        result.append(sorted(links | {(len(s) - 1, len(t) - 1)}))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(result), encoding="utf-8")
    return result
