"""The job spec's version 7 fields (issue #21): validation, and the wire left out at defaults."""

from __future__ import annotations

import pytest

from reckon.model import events as E
from reckon.model import messages as M
from reckon.model.arrays import parse_array
from reckon.model.jobs import MAX_SCRIPT, V7_SPEC_DEFAULTS, JobRecord, JobSpec
from reckon.model.output_paths import check_pattern, expand_pattern, output_path

BASE = {"name": "j", "command": ["run.sh"], "cwd": None, "env": [], "slots": 1}
FULL = dict(BASE, time_limit=60, script="#!/bin/sh\necho hi\n", warn_signal=12, warn_before=30,
            warn_batch_only=True, open_mode="append", after_any=["3"], after_not_ok=["4"],
            labels=[["account", "lab"], ["comment", "x y"]], slurm_env=True)


def test_protocol_version_is_7():
    assert M.PROTOCOL_VERSION == 7 and 7 in M.SUPPORTED_VERSIONS and M.SPEC7_SINCE == 7


def test_v7_fields_round_trip():
    spec = JobSpec.from_dict(FULL)
    assert spec.labels == (("account", "lab"), ("comment", "x y")) and spec.uses_v7
    assert spec.dependencies == ("3", "4")
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict() == dict(FULL, time_limit=60)


def test_v7_fields_are_left_out_at_their_defaults():
    spec = JobSpec.from_dict(BASE)
    assert not spec.uses_v7
    assert spec.to_dict() == BASE
    assert all(key not in spec.to_dict() for key in V7_SPEC_DEFAULTS)


def test_labels_may_come_as_a_map():
    spec = JobSpec.from_dict(dict(BASE, labels={"wckey": "w", "account": "a"}))
    assert spec.labels == (("account", "a"), ("wckey", "w"))


@pytest.mark.parametrize("change, words", [
    ({"script": ""}, "script must not be empty"),
    ({"script": "a\0b"}, "NUL"),
    ({"script": "x" * (MAX_SCRIPT + 1)}, "script is longer"),
    ({"script": "\u00e9" * (MAX_SCRIPT // 2 + 1)}, "script is longer than"),
    ({"script": "\ud800"}, "surrogates"),
    ({"warn_signal": 10}, "warn_signal needs a time_limit"),
    ({"warn_signal": 0, "time_limit": 5}, "warn_signal must be >= 1"),
    ({"warn_signal": 65, "time_limit": 5}, "warn_signal must be <= 64"),
    ({"warn_before": 5}, "need a warn_signal"),
    ({"warn_batch_only": True}, "need a warn_signal"),
    ({"warn_signal": 10, "time_limit": 5, "warn_before": 65536}, "warn_before must be <= 65535"),
    ({"warn_signal": 10, "time_limit": 5, "warn_batch_only": 1}, "warn_batch_only must be a bool"),
    ({"open_mode": "overwrite"}, "open_mode must be one of append, truncate"),
    ({"after": ["1"], "after_any": ["1"]}, "name a job twice"),
    ({"after_not_ok": [""]}, "after_not_ok job must not be empty"),
    ({"after_any": "1"}, "after_any must be a list"),
    ({"labels": [["Account", "x"]]}, "lowercase letters"),
    ({"labels": [["b", "x"], ["a", "y"]]}, "sorted by key"),
    ({"labels": [["a", "x"], ["a", "y"]]}, "sorted by key"),
    ({"labels": [["k" * 33, "x"]]}, "longer than 32"),
    ({"labels": [["a", "x" * 1025]]}, "longer than 1024"),
    ({"labels": {f"k{'_' * i}": "v" for i in range(17)}}, "more than 16 labels"),
    ({"labels": [["a"]]}, "pair"),
    ({"slurm_env": "yes"}, "slurm_env must be a bool"),
])
def test_v7_refusals_name_the_field(change, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        JobSpec.from_dict(dict(BASE, **change))


def test_a_4_mib_script_of_ascii_is_accepted():
    assert JobSpec.from_dict(dict(BASE, script="x" * MAX_SCRIPT)).script is not None


def test_the_job_object_shows_the_v7_fields_not_the_script_text():
    record = JobRecord(id="7", spec=JobSpec.from_dict(FULL))
    shown = record.to_dict()
    assert shown["labels"] == {"account": "lab", "comment": "x y"}
    assert shown["script"] is True and shown["open_mode"] == "append"
    assert shown["after_any"] == ["3"] and shown["after_not_ok"] == ["4"] and shown["array_max"] is None
    assert JobRecord.from_row(record.row()).snapshot_key() == record.snapshot_key()


def test_submit_events_take_hold():
    spec = JobSpec.from_dict(BASE)
    assert E.SubmitJob(spec=spec, now=1.0, hold=True).hold
    assert E.SubmitBatch(specs=(spec,), uids=("u",), now=1.0, hold=True).hold
    assert E.SubmitArray(spec=spec, array=parse_array("0-1"), now=1.0, hold=True).hold
    assert not E.SubmitJob(spec=spec, now=1.0).hold
    with pytest.raises(ValueError, match="hold must be a bool"):
        E.SubmitJob(spec=spec, now=1.0, hold=1)


def test_v7_output_patterns():
    for pattern in ("%A_%I.out", "%x-%u@%N.%j.%a", "%%"):
        check_pattern("output", pattern)
    assert expand_pattern("%A_%I-%x-%u-%N", job="9", attempt=1, array="5", index=4, name="n", user="u",
                          host="h") == "5_4-n-u-h"
    # A job not in an array: %A is its id and %I Slurm's NO_VAL - 1.
    assert expand_pattern("%A_%I", job="9", attempt=2) == "9_4294967294"
    assert output_path("o/%x", job="1", attempt=1, cwd="/d", base_dir=None, name="nm") == "/d/o/nm"
    with pytest.raises(ValueError, match="unknown pattern %t"):
        check_pattern("output", "%t")
