"""Comparing one command's normalised output with Slurm's golden (pure; used by
test_against_slurm.py, unit-tested in test_normalise.py).

Each mismatch is one line, ``<phase>/<file>: <what>: reckon <x> | slurm <y>``, so a
KNOWN_DIFFERENCES pattern (fnmatch) can excuse it with a reason:

- tables and parsable output: the header line exactly; then the rows, paired by their first
  field (the job id) and compared column by column (``<file>: <id>: <column>: ...``), or as a
  multiset where ids repeat; order is not compared (Slurm sorts by priority and submit time);
- scontrol's Key=Value output: record by record (matched by JobId=/PartitionName=), key by
  key: a key Slurm prints that reckon does not (``missing``), one reckon prints that Slurm does
  not (``extra``), and values that differ;
- text: line by line.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from pathlib import Path


def read_golden(path: Path) -> tuple[str, list[str]]:
    """(the command line after `$ `, the normalised output lines)."""
    first, *lines = path.read_text().splitlines()
    assert first.startswith("$ "), f"{path}: no command line"
    return first[2:], lines


def records(lines: list[str]) -> dict[str, dict[str, str]]:
    """scontrol words (normalise.py's keyvalue: one Key=Value a line) grouped by record: one starts
    at JobId=, PartitionName= or NodeName= (show config is one record, `config`).  A record is
    named by its array member (`{array}_3`: which member holds the array's own job id differs) or
    its first key."""
    groups: list[dict[str, str]] = []
    for word in lines:
        key, _, value = word.partition("=")
        if not groups or key in ("JobId", "PartitionName", "NodeName"):
            groups.append({})
        groups[-1][key] = value
    out: dict[str, dict[str, str]] = {}
    for group in groups:
        first, value = next(iter(group.items()))
        if "ArrayTaskId" in group:
            name = f"{group.get('ArrayJobId')}_{group['ArrayTaskId']}"
        elif first in ("JobId", "PartitionName", "NodeName"):
            name = f"{first}={value}"
        else:
            name = "config"
        out[name] = group
    return out


def compare(name: str, kind: str, reckon: list[str], slurm: list[str], columns: tuple[str, ...] = ()) -> list[str]:
    if kind == "keyvalue":
        return _compare_records(name, records(reckon), records(slurm))
    if kind in ("table", "parsable"):
        head_r, head_s = (reckon[:1] or [""])[0], (slurm[:1] or [""])[0]
        out = [] if head_r == head_s else [f"{name}: header: reckon {head_r!r} | slurm {head_s!r}"]
        rule_r = [ln for ln in reckon[1:2] if _is_rule(ln)]
        rule_s = [ln for ln in slurm[1:2] if _is_rule(ln)]
        if rule_r != rule_s:
            out.append(f"{name}: rule line: reckon {rule_r!r} | slurm {rule_s!r}")
        names = head_s.split("|") if kind == "parsable" else head_s.split()
        return out + _compare_rows(name, names, reckon[1 + len(rule_r):], slurm[1 + len(rule_s):])
    if kind.endswith("noheader"):
        return _compare_rows(name, list(columns), reckon, slurm)
    out = []
    for i in range(max(len(reckon), len(slurm))):
        r = reckon[i] if i < len(reckon) else None
        s = slurm[i] if i < len(slurm) else None
        if r != s:
            out.append(f"{name}: line {i + 1}: reckon {r!r} | slurm {s!r}")
    return out


def _is_rule(line: str) -> bool:
    return bool(line.strip()) and set(line.strip()) <= {"-", " "}


def _compare_rows(name: str, columns: list[str], reckon: list[str], slurm: list[str]) -> list[str]:
    """Rows (fields joined by `|`) paired by their first field where it is unique on both sides,
    then compared column by column; the rest as a multiset of whole rows."""
    out: list[str] = []
    by_r, by_s = _by_key(reckon), _by_key(slurm)
    job_ids = [k for k, col in enumerate(columns) if col.lower() in ("jobid", "%i")]
    if (by_r is None or by_s is None) and job_ids:  # squeue %all begins with ACCOUNT: pair by JOBID
        by_r, by_s = _by_key(reckon, job_ids[0]), _by_key(slurm, job_ids[0])
    if by_r is not None and by_s is not None:
        for key in by_s:
            if key not in by_r:
                out.append(f"{name}: row: reckon (none) | slurm {by_s[key]!r}")
                continue
            fr, fs = by_r[key].split("|"), by_s[key].split("|")
            if len(fr) != len(fs):
                out.append(f"{name}: {key}: reckon {by_r[key]!r} | slurm {by_s[key]!r}")
                continue
            for i, (vr, vs) in enumerate(zip(fr, fs)):
                if vr != vs:
                    col = columns[i] if i < len(columns) else f"field {i + 1}"
                    out.append(f"{name}: {key}: {col}: reckon {vr!r} | slurm {vs!r}")
        return out + [f"{name}: row: reckon {by_r[key]!r} | slurm (none)" for key in by_r if key not in by_s]
    r, s = Counter(reckon), Counter(slurm)
    return ([f"{name}: row: reckon {row!r} | slurm (none)" for row in sorted((r - s).elements())]
            + [f"{name}: row: reckon (none) | slurm {row!r}" for row in sorted((s - r).elements())])


def _by_key(rows: list[str], column: int = 0) -> dict[str, str] | None:
    keys = [(row.split("|") + [""] * column)[column] for row in rows]
    return dict(zip(keys, rows)) if len(set(keys)) == len(keys) else None


def _compare_records(name: str, reckon: dict[str, dict[str, str]], slurm: dict[str, dict[str, str]]) -> list[str]:
    out = [f"{name}: record {rec}: reckon (none) | slurm (the record)" for rec in slurm if rec not in reckon]
    out += [f"{name}: record {rec}: reckon (the record) | slurm (none)" for rec in reckon if rec not in slurm]
    for rec, s in slurm.items():
        r = reckon.get(rec)
        if r is None:
            continue
        where = f"{name}: {rec}"
        for key in s:
            if key not in r:
                out.append(f"{where}: missing {key}: reckon (none) | slurm {s[key]!r}")
            elif r[key] != s[key]:
                out.append(f"{where}: {key}: reckon {r[key]!r} | slurm {s[key]!r}")
        out += [f"{where}: extra {key}: reckon {r[key]!r} | slurm (none)" for key in r if key not in s]
    return out


def unexplained(mismatches: list[str], known: dict[str, str]) -> list[str]:
    """The mismatches no KNOWN_DIFFERENCES pattern covers."""
    return [m for m in mismatches if not any(fnmatch.fnmatchcase(m, pattern) for pattern in known)]
