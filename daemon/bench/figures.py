"""A benchmark's repeated runs summed up: min / median / max, and how that reads in a summary line."""

from __future__ import annotations

import statistics


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": len(values)}


def summary_text(s: dict[str, float], unit: str, scale: float = 1.0, digits: int = 2) -> str:
    return (f"median {s['median'] * scale:.{digits}f} {unit} (min {s['min'] * scale:.{digits}f}, "
            f"max {s['max'] * scale:.{digits}f}, {s['runs']} runs)")
