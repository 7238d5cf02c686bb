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
LEGEND_W = 160


def viridis(weight: float) -> str:
    x = min(max(weight, 0.0), 1.0) * (len(VIRIDIS) - 1)
    i = min(int(x), len(VIRIDIS) - 2)
    f = x - i
    r, g, b = (round(a + (c - a) * f) for a, c in zip(VIRIDIS[i], VIRIDIS[i + 1], strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _width(text: str) -> int:
    """A rough label width: CJK characters are about twice as wide as Latin ones."""
    return sum(FONT if ord(ch) > 0x2E80 else FONT * 0.6 for ch in text).__ceil__()


def heatmap_svg(source: list[str], target: list[str], matrix: list[list[float]], title: str, caption: str = "") -> str:
    """The heatmap with its title and caption above, rotated source labels, target labels on the
    left and a colour legend below; the canvas is sized so that no label or title is clipped."""
    title = f"{title} ({caption})" if caption else title
    left = max((_width(t) for t in target), default=0) + 12
    label_room = int(max((_width(s) for s in source), default=0) * 0.71) + FONT  # rotated 45 degrees
    top = 30 + label_room
    grid_w, grid_h = CELL * len(source), CELL * len(target)
    legend_y = top + grid_h + 16
    width = max(left + grid_w + label_room, _width(title) + 16, left + LEGEND_W + 60)
    height = legend_y + 34
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="{FONT_STACK}" font-size="{FONT}" role="img" aria-label="{escape(title, {chr(34): "&quot;"})}">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        f'<text x="8" y="18" font-size="{FONT}" fill="#333">{escape(title)}</text>',
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
    parts += _legend(left, legend_y)
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(x: int, y: int) -> list[str]:
    """A colour bar from 0 to 1: what a cell's shade means."""
    steps = 20
    parts = [f'<g class="legend"><text x="{x}" y="{y - 3}" font-size="11" fill="#333">attention weight</text>']
    for k in range(steps):
        parts.append(
            f'<rect x="{x + k * LEGEND_W / steps:.1f}" y="{y + 2}" width="{LEGEND_W / steps + 0.5:.1f}" height="10" '
            f'fill="{viridis(k / (steps - 1))}"/>'
        )
    for value, anchor, dx in (("0", "start", 0), ("0.5", "middle", LEGEND_W / 2), ("1", "end", LEGEND_W)):
        parts.append(
            f'<text x="{x + dx:.1f}" y="{y + 26}" font-size="11" text-anchor="{anchor}" fill="#333">{value}</text>'
        )
    parts.append("</g>")
    return parts
