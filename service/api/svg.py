"""A self-contained SVG heatmap of attention, built as text (no plotting library in the image).

Rows are target tokens, columns source tokens; each cell is shaded with viridis (ordered and
readable with the common colour-vision deficiencies) and carries a <title> tooltip. Labels use a
font stack with common CJK fonts so Chinese renders wherever one of them is installed.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

FONT_STACK = (
    "'Noto Sans CJK SC', 'Source Han Sans SC', 'WenQuanYi Micro Hei', 'PingFang SC', "
    "'Microsoft YaHei', 'Hiragino Sans GB', 'DejaVu Sans', sans-serif"
)
# viridis at 0, .25, .5, .75, 1
VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
CELL, FONT = 28, 13


def viridis(weight: float) -> str:
    x = min(max(weight, 0.0), 1.0) * (len(VIRIDIS) - 1)
    i = min(int(x), len(VIRIDIS) - 2)
    f = x - i
    r, g, b = (round(a + (c - a) * f) for a, c in zip(VIRIDIS[i], VIRIDIS[i + 1], strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _width(text: str) -> int:
    """A rough label width: CJK characters are about twice as wide as Latin ones."""
    return sum(FONT if ord(ch) > 0x2E80 else FONT * 0.6 for ch in text).__ceil__()


def heatmap_svg(source: list[str], target: list[str], matrix: list[list[float]], title: str) -> str:
    left = max((_width(t) for t in target), default=0) + 12
    top = int(max((_width(s) for s in source), default=0) * 0.75) + 36
    width, height = left + CELL * len(source) + 10, top + CELL * len(target) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="{FONT_STACK}" font-size="{FONT}" role="img" aria-label="{escape(title, {chr(34): "&quot;"})}">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        f'<text x="4" y="16" font-size="{FONT}" fill="#333">{escape(title)}</text>',
    ]
    for j, label in enumerate(source):
        x, y = left + CELL * j + CELL / 2, top - 6
        parts.append(
            f'<text class="source" x="{x:.1f}" y="{y}" transform="rotate(-45 {x:.1f} {y})">{escape(label)}</text>'
        )
    for i, (label, row) in enumerate(zip(target, matrix, strict=True)):
        y = top + CELL * i
        parts.append(
            f'<text class="target" x="{left - 6}" y="{y + CELL * 0.65:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        for j, weight in enumerate(row):
            tip = escape(f"{label} → {source[j]}: {weight:.3f}")
            parts.append(
                f'<rect class="cell" x="{left + CELL * j}" y="{y}" width="{CELL - 1}" height="{CELL - 1}" '
                f'fill="{viridis(weight)}"><title>{tip}</title></rect>'
            )
    parts.append("</svg>")
    return "\n".join(parts)
