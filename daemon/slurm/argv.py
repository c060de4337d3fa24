"""Option parsing as Slurm's commands do it: glibc's ``getopt_long``, without argparse.

Slurm's commands parse with ``getopt_long``, and the tools that drive them rely on its rules:
``--opt=value`` and ``--opt value``, a unique prefix of a long option (``--part`` for
``--partition``), short options clustered (``-Hv``) or with their value attached (``-Jname``)
or apart (``-J name``), an optional argument only attached (``--exclusive=user``, never
``--exclusive user``), ``--`` ending the options.  sbatch and srun stop at the first operand
(their optstring starts with ``+``: the script's or command's own arguments follow it); scancel
permutes (``scancel 123 --signal USR2`` is submitit's spelling).

Light: no argparse (``python -IS -X importtime``: 15 ms here, 10 of them ``re``, 1.3 ``gettext``;
this module: 0.3 ms), no dataclasses.
An option is a tuple ``(long, short, arg)`` (``arg``: 0 none, 1 required, 2 optional); the parse
is a list of ``(long, value)`` in command-line order (``value`` None for a flag).
"""

from __future__ import annotations

NONE, REQUIRED, OPTIONAL = 0, 1, 2


class OptionError(Exception):
    """A command line getopt_long refuses; the text is getopt's own (``unrecognized option '--x'``)."""


class UsageProblem(ValueError):
    """A query command's line that cannot work as written (squeue, sacct, sinfo, scontrol: exit status 2)."""


def parse(argv: list[str], options: list[tuple[str, str | None, int]], *, permute: bool
          ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """``(parsed options, operands)`` of ``argv`` (the words after the command's name).

    ``permute``: GNU's default (options and operands mixed, operands kept in order); else stop
    at the first operand and keep it and everything after it as operands (optstring ``+``).
    """
    longs = {o[0]: o for o in options}
    shorts = {o[1]: o for o in options if o[1]}
    parsed: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    n = len(argv)
    while i < n:
        word = argv[i]
        i += 1
        if word == "--":
            operands.extend(argv[i:])
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            option = _long(name, longs)
            long, _, arg = option
            if eq and arg == NONE:
                raise OptionError(f"option '--{long}' doesn't allow an argument")
            if not eq:
                if arg == REQUIRED:
                    if i >= n:
                        raise OptionError(f"option '--{long}' requires an argument")
                    value = argv[i]
                    i += 1
                    eq = "="
            parsed.append((long, value if eq else None))
            continue
        if word.startswith("-") and word != "-":
            j = 1
            while j < len(word):
                letter = word[j]
                option = shorts.get(letter)
                if option is None:
                    raise OptionError(f"invalid option -- '{letter}'")
                long, _, arg = option
                rest = word[j + 1:]
                if arg == NONE:
                    parsed.append((long, None))
                    j += 1
                    continue
                if rest:
                    parsed.append((long, rest))
                elif arg == REQUIRED:
                    if i >= n:
                        raise OptionError(f"option requires an argument -- '{letter}'")
                    parsed.append((long, argv[i]))
                    i += 1
                else:
                    parsed.append((long, None))
                break
            continue
        operands.append(word)
        if not permute:
            operands.extend(argv[i:])
            break
    return parsed, operands


def _long(name: str, longs: dict[str, tuple[str, str | None, int]]) -> tuple[str, str | None, int]:
    """The option ``--name`` names: itself, else the one long option it is a prefix of."""
    option = longs.get(name)
    if option is not None:
        return option
    matches = [o for long, o in longs.items() if long.startswith(name)] if name else []
    if not matches:
        raise OptionError(f"unrecognized option '--{name}'")
    if len(matches) > 1:
        names = " ".join(f"'--{o[0]}'" for o in matches)
        raise OptionError(f"option '--{name}' is ambiguous; possibilities: {names}")
    return matches[0]


def parse_keyed(argv: list[str], options: dict[str, tuple[str, bool]],
                lists: frozenset[str] = frozenset()) -> tuple[dict[str, object], list[str]]:
    """The query commands' form of ``parse`` (permuting): ``options`` maps each spelling (``-j``,
    ``--jobs``) to (key, takes a value); the result maps keys to values (True for a flag).  A repeated
    option's last value wins, but for the keys in ``lists``, whose values add up (``sacct -j 1 -j 2``,
    as submitit calls it, is ``-j 1,2``).  getopt's refusals become ``UsageProblem``."""
    table = [(s[2:], None, REQUIRED if wants else NONE) if s.startswith("--")
             else (s, s[1], REQUIRED if wants else NONE) for s, (_, wants) in options.items()]
    try:
        parsed, operands = parse(argv, table, permute=True)
    except OptionError as exc:
        raise UsageProblem(str(exc)) from None
    values: dict[str, object] = {}
    for name, value in parsed:
        key = options[name if name.startswith("-") else "--" + name][0]
        if value is None:
            values[key] = True
        elif key in lists and key in values:
            values[key] = f"{values[key]},{value}"
        else:
            values[key] = value
    return values, operands


def split_list(text: str) -> list[str]:
    """``a,b c`` -> ['a', 'b', 'c']: Slurm's lists take commas (and, quoted, spaces)."""
    return [part for chunk in text.split(",") for part in chunk.split() if part]
