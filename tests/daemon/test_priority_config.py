"""The controller's [priority] table (daemon/cli/config.py priority_of)."""

import pytest

from reckon.daemon.cli.config import ConfigError, priority_of
from reckon.model.priority import PriorityConfig


def test_the_table_with_durations_and_shares(tmp_path):
    path = tmp_path / "reckon.toml"
    path.write_text('[priority]\nweight_age = 500\nhalf_life = "2d"\nage_max = 3600\n'
                    '[priority.shares]\nbob = 2\nalice = 3\n')
    config = priority_of(path)
    assert (config.weight_age, config.half_life, config.age_max) == (500, 172800.0, 3600)
    assert config.shares == (("alice", 3), ("bob", 2))
    path.write_text("[controller]\n")
    assert priority_of(path) == PriorityConfig()


@pytest.mark.parametrize(("text", "words"), [
    ("[priority]\nweight_age = -1\n", "weight_age"),
    ("[priority]\nhalf_life = \"soon\"\n", "priority.half_life"),
    ("[priority]\nnope = 1\n", "unknown key"),
    ("[priority]\nshares = 3\n", "priority.shares"),
    ("[priority.shares]\nalice = 0\n", "shares"),
])
def test_a_bad_key_is_one_line(tmp_path, text, words):
    path = tmp_path / "reckon.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as info:
        priority_of(path)
    assert "\n" not in str(info.value)
