"""The values of Slurm's options, read as Slurm reads them: times, sizes, GPUs and generic
resources, dependencies, ``--signal``, ``--export``, output patterns.  Pure functions of text
(plus the caller's environment for ``--export``); each bad value is a ``SlurmCommandError``
with one line.  Light: no re, no model (the controller checks the spec these build).
"""

from __future__ import annotations

import time

from reckon.daemon.slurm.argv import UsageProblem
from reckon.daemon.slurm.common import SlurmCommandError, invalid, signal_number

MIB = 1 << 20
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _whole(text: str, what: str) -> int:
    if not text.isdigit():
        raise invalid(f"Invalid {what}: {text!r}")
    return int(text)


def parse_time(text: str) -> float | None:
    """Seconds of a Slurm time limit; None for no limit (``UNLIMITED``, ``INFINITE``, ``0``).

    Slurm's formats: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.  (Slurm rounds a
    limit up to whole minutes; reckon keeps the seconds.)
    """
    word = text.strip()
    if word.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    days, dash, rest = word.partition("-")
    if not dash:
        rest, days = word, ""
    parts = rest.split(":")
    if not rest or len(parts) > 3 or not all(p.isdigit() for p in parts) or (dash and not days.isdigit()):
        raise invalid(f"Invalid time limit specification: {text!r} (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S "
                                "or UNLIMITED)")
    numbers = [int(p) for p in parts]
    if dash:  # D-H, D-H:M, D-H:M:S
        numbers += [0] * (3 - len(numbers))
        seconds = ((int(days) * 24 + numbers[0]) * 60 + numbers[1]) * 60 + numbers[2]
    elif len(numbers) == 1:  # M
        seconds = numbers[0] * 60
    elif len(numbers) == 2:  # M:S
        seconds = numbers[0] * 60 + numbers[1]
    else:  # H:M:S
        seconds = (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]
    return float(seconds) if seconds else None


def parse_mem(text: str, what: str = "--mem") -> int:
    """Bytes of a Slurm memory size: a whole number with an optional K, M, G or T (and B); MiB by
    default, as Slurm.  0 is returned as 0 (``--mem=0``: all of a node's memory)."""
    word = text.strip().upper()
    if word.endswith("B") and len(word) > 1 and word[-2] in _SIZE_UNITS:
        word = word[:-1]  # 4GB: submitit's spelling
    unit = MIB
    if word and word[-1] in _SIZE_UNITS:
        unit = _SIZE_UNITS[word[-1]]
        word = word[:-1]
    if not word.isdigit():
        raise invalid(f"Invalid {what} specification: {text!r} (a whole number with K, M, G or T; "
                                "M by default)")
    value = int(word) * unit
    return value if value == 0 else max(value, MIB)  # at least 1 MiB: Slurm counts memory in MiB


def parse_gpus(text: str, what: str = "--gpus") -> int:
    """``N`` or ``TYPE:N`` -> N (reckon does not tell GPU types apart)."""
    count = text.strip().rpartition(":")[2]
    if not count.isdigit():
        raise invalid(f"Invalid {what} specification: {text!r} ([TYPE:]COUNT)")
    return int(count)


def parse_gres(text: str) -> tuple[int, dict[str, int]]:
    """``gpu:2,license:1`` -> (GPUs, {other name: count}); ``gpu:TYPE:N`` counts as N GPUs.

    ``gres/`` prefixes (Slurm's TRES spelling) are dropped; a name alone counts 1.
    """
    gpus = 0
    others: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[5:]
        if not item:
            continue
        fields = item.split(":")
        name = fields[0]
        count = fields[-1] if len(fields) > 1 else "1"
        if len(fields) > 3 or not count.isdigit() or not name:
            raise invalid(f"Invalid generic resource (--gres) specification: {item!r} (NAME[:TYPE]:COUNT)")
        if name == "gpu":
            gpus += int(count)
        else:
            others[name] = others.get(name, 0) + int(count)
    return gpus, others


def parse_licenses(text: str) -> dict[str, int]:
    """``-L lic:2,other`` -> {name: count}: reckon's generic resources (``lic@db:2``: the ``@`` part dropped)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.partition(":")
        name, count = name.partition("@")[0], count if sep else "1"
        if not count.isdigit() or not name:
            raise invalid(f"Invalid license specification: {item!r} (NAME[:COUNT])")
        out[name] = out.get(name, 0) + int(count)
    return out


DEPENDENCY_KEYS = {"afterok": "after", "afterany": "after_any", "afternotok": "after_not_ok"}


def parse_dependency(text: str) -> dict[str, list[str]]:
    """``afterok:1:2,afterany:3`` -> {"after": [1, 2], "after_any": [3]}: the spec's keys.

    All of them must be met (``,``); ``?`` (any one of them) is the same when one job is named,
    else refused, as are ``after`` (started), ``aftercorr`` and ``afterburstbuffer``; ``singleton``
    gives {"singleton": True}.
    """
    out: dict[str, list[str]] = {}
    text = text.strip()
    if "?" in text:
        if text.count(":") > 1 or "," in text:
            raise SlurmCommandError(f"--dependency={text}: reckon waits for all dependencies (','), not any one "
                                    "of them ('?')")
        text = text.replace("?", ",")
    for item in text.split(","):
        if not item:
            continue
        kind, _, ids = item.partition(":")
        if kind == "singleton":  # one job at a time of this name and user (the spec's singleton)
            if ids:
                raise invalid(f"Invalid dependency specification: {item!r} (singleton takes no job)")
            out["singleton"] = True  # type: ignore[assignment]
            continue
        key = DEPENDENCY_KEYS.get(kind)
        if key is None:
            raise SlurmCommandError(f"--dependency={text}: reckon knows afterok, afterany and afternotok, "
                                    f"not {kind!r}")
        jobs = [j for j in ids.split(":") if j]
        if not jobs or any("+" in j for j in jobs):  # JOB+MINUTES: a delay after the job
            raise invalid(f"Invalid dependency specification: {item!r} ({kind}:JOB[:JOB...])")
        for job in jobs:
            if job not in out.setdefault(key, []):
                out[key].append(job)
    return out


def parse_signal(text: str) -> tuple[int, int, bool]:
    """``[B:]SIG[@SECS]`` -> (signal number, seconds before the limit, batch shell only)."""
    word = text.strip()
    batch = False
    if word[:2].upper() in ("B:", "R:"):
        if word[0].upper() == "R":
            raise SlurmCommandError(f"--signal={text}: reckon has no reservations (R:)")
        batch, word = True, word[2:]
    sig, at, secs = word.partition("@")
    if at and (not secs.isdigit() or int(secs) > 65535):
        raise invalid(f"Invalid --signal specification: {text!r} ([B:]SIG[@SECS], SECS at most 65535)")
    return signal_number(sig), int(secs) if at else 60, batch


def parse_open_mode(text: str) -> str:
    """``append`` or ``truncate``: as Slurm, by the first letter (``a``, ``T``: SLURM_OPEN_MODE's spelling)."""
    first = text.strip()[:1].lower()
    if first not in ("a", "t"):
        raise invalid(f"Invalid --open-mode specification: {text!r} (append or truncate)")
    return "append" if first == "a" else "truncate"


CLUSTER = "reckon"  # the name the jobs see (SLURM_CLUSTER_NAME)


def check_clusters(text: str, what: str = "--clusters") -> None:
    """``-M all`` or ``-M reckon`` (Snakemake's ``scancel ... --clusters=all``); another cluster is refused."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    other = [n for n in names if n not in ("all", CLUSTER)]
    if not names or other:
        raise SlurmCommandError(f"{what}={text}: reckon is one cluster, named {CLUSTER} (or give all)")


def parse_nodes(text: str) -> None:
    """``-N 1`` (or ``1-N``, which Slurm may meet with one node); more than one node is refused."""
    low = text.strip().partition("-")[0]
    if not low.isdigit():
        raise invalid(f"Invalid node count specification: {text!r}")
    if int(low) > 1:
        raise SlurmCommandError(f"--nodes={text}: reckon runs single-node jobs (at most 1 node)")


def parse_one(name: str, text: str) -> None:
    """``-n 1`` and the ``--ntasks-per-*`` options: one task only."""
    if not text.strip().isdigit():
        raise invalid(f"Invalid --{name} specification: {text!r}")
    if int(text) > 1:
        raise SlurmCommandError(f"--{name}={text}: reckon runs one task per job (at most 1)")


TASK_OPTIONS = ("ntasks", "ntasks-per-node", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-socket")


def check_one_task(opts: dict[str, str | None]) -> None:
    """Every task-count option of ``opts`` asks one task at most (sbatch, and srun in a job)."""
    for name in TASK_OPTIONS:
        if opts.get(name) is not None:
            parse_one(name, opts[name] or "")


_SECRETS = frozenset({"RECKON_TOKEN"})  # left out of --export=ALL (named explicitly, they go)


def export_env(text: str | None, environ: dict[str, str]) -> list[list[str]]:
    """The job's environment for ``--export`` (Slurm's default ALL: the caller's environment).

    ``NONE``: none of the caller's; ``ALL,VAR=val,...``: the caller's plus those; ``VAR,VAR=val``
    without ALL: only those (a bare name takes the caller's value).  The caller's ``SLURM_*``
    variables stay behind (they describe the caller's own job, if any; the agent sets the job's),
    and so does ``RECKON_TOKEN`` unless named: the spec is durable (the controller's log, backups),
    and a secret must not land there by default.
    """
    words = [w for w in (text or "ALL").split(",") if w]
    if not words:
        raise invalid(f"Invalid --export specification: {text!r}")
    first = words[0].upper()
    env: dict[str, str] = {}
    if first == "ALL":
        env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") and k not in _SECRETS}
        words = words[1:]
    elif first == "NONE":
        words = words[1:]
    for word in words:
        key, eq, value = word.partition("=")
        if not key or key.upper() in ("ALL", "NONE"):
            raise invalid(f"Invalid --export specification: {text!r} (ALL or NONE come first)")
        if eq:
            env[key] = value
        elif key in environ:
            env[key] = environ[key]
    return [[k, v] for k, v in env.items()]


# Slurm's filename pattern letters -> reckon's (model/output_paths.py).  Slurm's %a (the array
# index) is reckon's %I: reckon's own %a is the attempt.  One task, one node: %t, %n, %s are 0.
_PATTERN = {"j": "%j", "A": "%A", "a": "%I", "x": "%x", "u": "%u", "N": "%N", "%": "%%", "J": "%j",
            "t": "0", "n": "0", "s": "0"}


def translate_pattern(text: str, what: str) -> str:
    """A Slurm ``-o``/``-e`` pattern in reckon's letters; a pattern with a backslash is taken as
    it is (Slurm: no substitution, backslashes removed)."""
    if "\\" in text:
        return text.replace("\\", "").replace("%", "%%")
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        j = i + 1
        while j < len(text) and text[j].isdigit():
            j += 1
        letter = text[j] if j < len(text) else ""
        if j > i + 1:
            raise SlurmCommandError(f"{what}={text}: reckon does not zero-pad pattern fields (%{text[i + 1:j]}{letter})")
        if letter not in _PATTERN:
            raise SlurmCommandError(f"{what}={text}: reckon does not know the pattern %{letter} (known: %j %A %a %x "
                                    "%u %N %t %n %s %%)")
        out.append(_PATTERN[letter])
        i = j + 1
    return "".join(out)


def directive_words(line: str) -> list[str]:
    """The words of one ``#SBATCH`` line's rest, as Slurm splits them: blanks apart, quotes kept
    together (and removed), a word starting with ``#`` ends the line (a comment)."""
    words: list[str] = []
    i = 0
    n = len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] == "#":
            break
        word: list[str] = []
        quote = ""
        while i < n and (quote or line[i] not in " \t"):
            char = line[i]
            if quote and char == quote:
                quote = ""
            elif not quote and char in "'\"":
                quote = char
            else:
                word.append(char)
            i += 1
        words.append("".join(word))
    return words


def script_directives(script: str) -> list[str]:
    """The option words of a batch script's ``#SBATCH`` lines, as Slurm reads them: from the
    line after ``#!``, up to the first line that is neither blank nor a comment."""
    words: list[str] = []
    for line in script.split("\n")[1:]:
        if line.startswith("#SBATCH"):
            rest = line[7:]
            if rest[:1] in (" ", "\t"):
                words.extend(directive_words(rest))
            continue  # #SBATCHX, #SBATCH alone: a comment
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
    return words


def parse_when(text: str, now: float, future: bool = False) -> float:
    """A point in time as Slurm's parse_time reads it: ``now[{+|-}N[unit]]`` (seconds by default),
    ``today``, ``tomorrow``, ``midnight``, ``noon``, ``elevenses``, ``fika``, ``teatime``,
    ``YYYY-MM-DD[THH:MM[:SS]]``, ``MM/DD[/YY]``, ``MMDD[YY]``, ``HH:MM[:SS]``, seconds since the
    epoch with a leading ``@`` (or Slurm's ``uts``).  sacct -S/-E look back (a time of day is
    today's); ``future`` (sbatch --begin) looks ahead as Slurm does: a time of day already past
    is tomorrow's, a date without a year already past is next year's."""
    text = text.strip()
    lower = text.lower()
    local = time.localtime(now)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    if lower.startswith("now"):
        rest = lower[3:].replace(" ", "")
        if not rest:
            return now
        sign = 1 if rest[0] == "+" else -1 if rest[0] == "-" else 0
        digits = rest[1:]
        k = 0
        while k < len(digits) and digits[k].isdigit():
            k += 1
        unit = digits[k:]
        scale = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
                 "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
                 "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}.get(unit)
        if not sign or not k or scale is None:
            raise UsageProblem(f"invalid time specification '{text}'")
        return now + sign * int(digits[:k]) * scale
    if lower in ("today", "tomorrow"):
        return midnight if lower == "today" else _next_day(midnight)
    named = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
    if lower in named:
        return _soonest(midnight + named[lower] * 3600, now, future)
    if text.startswith("@") and text[1:].isdigit():
        return float(text[1:])
    if lower.startswith("uts") and text[3:].isdigit():
        return float(text[3:])
    try:
        if "-" in text and text[:4].isdigit():  # YYYY-MM-DD[THH:MM[:SS]]
            day, _, clock = text.partition("T")
            year, month, mday = (int(p) for p in day.split("-"))
            hh, mm, ss = _clock(clock) if clock else (0, 0, 0)
            return time.mktime((year, month, mday, hh, mm, ss, 0, 0, -1))
        if "/" in text or (text.isdigit() and len(text) in (4, 6)):  # MM/DD[/YY][-HH:MM[:SS]], MMDD[YY]
            day, _, clock = text.partition("-")
            parts = [int(p) for p in day.split("/")] if "/" in day else [int(day[:2]), int(day[2:4])] + (
                [int(day[4:])] if len(day) == 6 else [])
            if not 2 <= len(parts) <= 3:
                raise ValueError(text)
            hh, mm, ss = _clock(clock) if clock else (0, 0, 0)
            year = local.tm_year if len(parts) == 2 else 2000 + parts[2] % 100
            when = time.mktime((year, parts[0], parts[1], hh, mm, ss, 0, 0, -1))
            if future and len(parts) == 2 and when <= now:  # no year: the next such day
                when = time.mktime((year + 1, parts[0], parts[1], hh, mm, ss, 0, 0, -1))
            return when
        if ":" in text:  # HH:MM[:SS] today (or, looking ahead, tomorrow once past)
            hh, mm, ss = _clock(text)
            return _soonest(midnight + hh * 3600 + mm * 60 + ss, now, future)
    except (ValueError, OverflowError):
        pass
    raise UsageProblem(f"invalid time specification '{text}'")


def _next_day(midnight: float) -> float:
    """The next day's midnight (a day is not always 86400 s: daylight saving)."""
    later = time.localtime(midnight + 36 * 3600)
    return time.mktime((later.tm_year, later.tm_mon, later.tm_mday, 0, 0, 0, 0, 0, -1))


def _soonest(today: float, now: float, future: bool) -> float:
    """A time of day: today's, or when looking ahead and it is not later than now, tomorrow's
    (Slurm compares hours and minutes: 16:00 given at 16:00:30 is tomorrow)."""
    if not future or today // 60 > now // 60:
        return today
    local = time.localtime(today)
    after = time.localtime(_next_day(time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))))
    return time.mktime((after.tm_year, after.tm_mon, after.tm_mday, local.tm_hour, local.tm_min, local.tm_sec,
                        0, 0, -1))


def _clock(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(":")]
    if not 2 <= len(parts) <= 3:
        raise ValueError(text)
    hh, mm, ss = parts[0], parts[1], parts[2] if len(parts) == 3 else 0
    if not (0 <= hh <= 23 and 0 <= mm <= 59 and 0 <= ss <= 59):  # as Slurm's _get_time refuses them
        raise ValueError(text)
    return hh, mm, ss
