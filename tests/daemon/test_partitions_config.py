"""The controller config file's [partitions.NAME] tables and `reckon partition set`'s words
(daemon/cli/partitions.py): every error one line naming the file, the table and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from reckon.daemon.cli.config import ConfigError, partitions_of
from reckon.daemon.cli.partitions import parse_assignments
from reckon.model.partitions import Partition


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reckon.toml"
    path.write_text(text)
    return path


def test_a_good_file(tmp_path: Path) -> None:
    path = _file(tmp_path, """
[partitions.gpu]
nodes = "gpu[01-04],big*"
max_mem_per_job = "64G"
allow_groups = ["physics"]
state = "drain"
[partitions.batch]
nodes = ["node[01-10]"]
default = true
max_time = "1d"
default_time = 3600
max_cpus_per_job = 64
priority_tier = 2
""")
    batch, gpu = partitions_of(path)
    assert batch == Partition(name="batch", nodes=("node[01-10]",), default=True, max_time=86400.0,
                              default_time=3600.0, max_cpus_per_job=64, priority_tier=2)
    assert gpu == Partition(name="gpu", nodes=("gpu[01-04]", "big*"), max_mem_per_job=64 << 30,
                            allow_groups=("physics",), state="DRAIN")


def test_no_table_is_none_and_an_empty_one_is_no_partitions(tmp_path: Path) -> None:
    assert partitions_of(_file(tmp_path, "[controller]\nstate-dir = '/x'\n")) is None
    assert partitions_of(_file(tmp_path, "[partitions]\n")) == ()


@pytest.mark.parametrize("text, words", [
    ("[partitions.a]\nstat = 1\n", "partitions.a.stat: unknown key"),
    ("[partitions.a]\nmax_time = '5x'\n", "partitions.a.max_time: bad value '5x'"),
    ("[partitions.a]\nnodes = 'n[1-'\n", "partitions.a.nodes: bad value"),
    ("[partitions.a]\nstate = 'broken'\n", "partitions.a.state: bad value 'broken': expected one of up"),
    ("[partitions.a]\nmax_cpus_per_job = 0\n", "partitions.a.max_cpus_per_job: bad value 0: must be 1 or more"),
    ("[partitions.a]\nmax_time = '1h'\ndefault_time = '2h'\n", "partitions.a: default_time (7200s) is over max_time"),
    ("[partitions.a]\ndefault = true\n[partitions.b]\ndefault = true\n", "partitions: more than one default"),
    ("[partitions.'a b']\n", "partition name 'a b'"),
])
def test_bad_files_name_the_key(tmp_path: Path, text: str, words: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        partitions_of(path)
    assert str(info.value).startswith(f"{path}: ") and words in str(info.value) and "\n" not in str(info.value)


def test_command_line_words() -> None:
    assert parse_assignments(["state=down", "max_time=2h", "nodes=n[1-2],m1", "max_mem_per_job=", "default=yes"]) == [
        ("state", "DOWN"), ("max_time", 7200.0), ("nodes", ["n[1-2]", "m1"]), ("max_mem_per_job", None),
        ("default", True)]
    with pytest.raises(ValueError, match="unknown key 'colour'"):
        parse_assignments(["colour=red"])
    with pytest.raises(ValueError, match="expected key=value"):
        parse_assignments(["state"])
