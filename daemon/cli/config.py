"""The daemons' TOML configuration file (``--config FILE``), read with the standard library's ``tomllib``.

One file may configure both daemons, in tables named after them::

    [controller]
    listen = "0.0.0.0:7420"
    state-dir = "/var/lib/reckon/controller"

    [agent]
    name = "node1"
    slots = 16

The keys of a table are the long options of that daemon's command, without
the dashes in front (``--state-dir`` is ``state-dir``): the file's schema is
read from the argparse definitions (``option_keys``), so a new option is a
new key at once and the two cannot drift.  Options given on the command line
override the file.  Values have the TOML type of the option: a string
(paths, ``HOST:PORT``, modes such as ``"0640"``), an integer, a number
(integer or float), a duration as a number of seconds or a string such as
``"10m"`` (as on the command line), a boolean for a switch.

The controller's partitions are tables of their own, ``[partitions.NAME]``
(``daemon/cli/partitions.py``): checked here too, read by the controller at its start.

``reckon config check FILE`` validates a file without starting anything;
every error names the key (``agent.slots``) and says what is wrong with it:
an unknown table or key, a wrong type, a bad value.  Exit status 2.
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOT_IN_FILE = frozenset({"help", "config"})  # options that make no sense in the file itself


class ConfigError(Exception):
    """A config file that cannot be used; ``str()`` names the file and the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Key:
    action: argparse.Action
    toml_type: str  # "string", "integer", "number", "boolean"


def _toml_type(action: argparse.Action) -> str:
    if action.nargs == 0:  # store_true / store_false
        return "boolean"
    declared = getattr(action.type, "toml_type", None)  # a converter says what it reads
    if declared is not None:
        return declared
    if action.type is int:
        return "integer"
    if action.type is float:
        return "number"
    return "string"


def option_keys(parser: argparse.ArgumentParser) -> dict[str, _Key]:
    """The file keys of a command's parser: its long options, by name."""
    keys: dict[str, _Key] = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs or action.dest in NOT_IN_FILE:
            continue
        keys[longs[0][2:]] = _Key(action=action, toml_type=_toml_type(action))
    return keys


# A duration is a number of seconds or a string such as "10m" (daemon/durations.py).
_PYTHON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
                 "duration": (int, float, str)}
_TYPE_NAMES = {"integer": "an integer", "duration": 'a duration (a number of seconds, or a string such as "10m")'}


def _convert(where: str, key: _Key, value: Any) -> Any:
    # bool is an int in Python; TOML keeps them apart, so do we.
    if isinstance(value, bool) != (key.toml_type == "boolean") or not isinstance(value, _PYTHON_TYPES[key.toml_type]):
        raise ConfigError(f"{where}: wrong type: expected {_TYPE_NAMES.get(key.toml_type, 'a ' + key.toml_type)}, "
                          f"got {type(value).__name__} {value!r}")
    action = key.action
    if key.toml_type == "boolean":
        return value
    try:
        converted = action.type(str(value)) if action.type is not None else value
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: bad value {value!r}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: bad value {value!r}: expected one of {', '.join(map(str, action.choices))}")
    return converted


def read_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text") from None


def daemon_values(path: Path, data: dict[str, Any], command: str,
                  parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The checked values of ``command``'s table, by argparse ``dest``."""
    table = data.get(command, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {command}: wrong type: expected a table, got {type(table).__name__}")
    keys = option_keys(parser)
    values: dict[str, Any] = {}
    for name, value in table.items():
        where = f"{path}: {command}.{name}"
        key = keys.get(name)
        if key is None:
            raise ConfigError(f"{where}: unknown key (the keys of [{command}] are: {', '.join(sorted(keys))})")
        values[key.action.dest] = _convert(where, key, value)
    return values


def check(path: Path, parsers: dict[str, argparse.ArgumentParser]) -> dict[str, dict[str, Any]]:
    """Validate every table of the file; the values by daemon.  ``ConfigError`` names the first bad key."""
    data = read_file(path)
    for name in data:
        if name not in parsers and name not in ("partitions", "priority"):
            raise ConfigError(f"{path}: {name}: unknown table (expected {' or '.join(f'[{d}]' for d in parsers)}"
                              ", [partitions.NAME] or [priority])")
    partitions_of(path, data)
    priority_of(path, data)
    found = {command: daemon_values(path, data, command, parser) for command, parser in parsers.items()
             if command in data}
    _check_daemon_tables(path, data, found)
    return found


def _check_daemon_tables(path: Path, data: dict[str, Any], found: dict[str, dict[str, Any]]) -> None:
    """What each daemon checks at its start and a key alone cannot show: a controller URL the agent can
    dial, and a controller with somewhere to keep its facts (the file is the whole configuration here)."""
    from reckon.daemon.client_common import UsageError, parse_controller_urls

    agent = found.get("agent", {})
    if agent.get("controller") is not None:
        try:
            parse_controller_urls(agent["controller"])
        except UsageError as exc:
            raise ConfigError(f"{path}: agent.controller: bad value {data['agent']['controller']!r}: {exc}") from None
    controller = found.get("controller")
    if controller is not None and controller.get("state_dir") is None and controller.get("store") is None:
        raise ConfigError(f"{path}: controller: no state-dir (nor store): the controller needs one to keep "
                          "its facts in")


def partitions_of(path: Path, data: dict[str, Any] | None = None) -> "tuple[Any, ...] | None":
    """The file's partitions (model/partitions.py records, by name); None when it has no
    ``[partitions]`` table.  ``ConfigError`` in one line naming the table and the key."""
    from reckon.daemon.cli.partitions import read_partitions

    try:
        return read_partitions(path, read_file(path) if data is None else data)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def apply_config(parser: argparse.ArgumentParser, path: Path, command: str) -> None:
    """Make the file's values ``parser``'s defaults: the command line still overrides each of them.

    An option the file gives is no longer required on the command line.
    """
    values = daemon_values(path, read_file(path), command, parser)
    for action in parser._actions:
        if action.dest in values:
            action.required = False
    parser.set_defaults(**values)


PRIORITY_DURATIONS = ("age_max", "half_life", "recompute_every")


def priority_of(path: Path, data: dict[str, Any] | None = None) -> Any:
    """The file's ``[priority]`` table as a model/priority.py ``PriorityConfig`` (the defaults
    where it says nothing, or has no table); ``[priority.shares]`` maps users to their shares.
    ``ConfigError`` in one line naming the key."""
    import dataclasses

    from reckon.daemon.durations import parse_seconds
    from reckon.model.priority import PriorityConfig

    table = (read_file(path) if data is None else data).get("priority", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: priority: wrong type: expected a table, got {type(table).__name__}")
    known = [f.name for f in dataclasses.fields(PriorityConfig)]
    values: dict[str, Any] = {}
    for name, value in table.items():
        where = f"{path}: priority.{name}"
        if name not in known:
            raise ConfigError(f"{where}: unknown key (the keys of [priority] are: {', '.join(known)})")
        if name == "shares":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table of user = share")
            value = tuple(sorted(value.items()))
        elif name in PRIORITY_DURATIONS and isinstance(value, str):
            try:
                value = parse_seconds(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        values[name] = value
    try:
        return PriorityConfig(**values)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
