"""A small SVG line plot, so a benchmark can draw its own figure without a plotting library."""

from __future__ import annotations

import math
from html import escape


def line_plot(points: list[tuple[float, float]], *, title: str, xlabel: str, ylabel: str,
              width: int = 560, height: int = 340) -> str:
    """Points on a log10 x axis and a linear y axis from 0, as an SVG document."""
    if len(points) < 2:
        raise ValueError("a line plot needs at least two points")
    left, right, top, bottom = 70, 20, 40, 50
    xs = [math.log10(x) for x, _ in points]
    ymax = max(y for _, y in points) * 1.15 or 1.0
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    if x1 == x0:
        x1 += 1

    def px(x: float) -> float:
        return left + (math.log10(x) - x0) / (x1 - x0) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - y / ymax * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{left}" y1="{py(0)}" x2="{width - right}" y2="{py(0)}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(0)}" stroke="black"/>']
    for e in range(x0, x1 + 1):
        x = left + (e - x0) / (x1 - x0) * (width - left - right)
        parts.append(f'<line x1="{x}" y1="{py(0)}" x2="{x}" y2="{py(0) + 5}" stroke="black"/>')
        parts.append(f'<text x="{x}" y="{py(0) + 18}" text-anchor="middle">{10 ** e:,}</text>')
    for i in range(5):
        y = ymax * i / 4
        parts.append(f'<line x1="{left - 5}" y1="{py(y)}" x2="{left}" y2="{py(y)}" stroke="black"/>')
        parts.append(f'<text x="{left - 8}" y="{py(y) + 4}" text-anchor="end">{y:.3g}</text>')
    path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, y in points:
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="#1f77b4"/>')
        parts.append(f'<text x="{px(x):.1f}" y="{py(y) - 8:.1f}" text-anchor="middle">{y:.3g}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">{escape(xlabel)}</text>')
    parts.append(f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {(top + height - bottom) / 2})">{escape(ylabel)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
