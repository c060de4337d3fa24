"""daemon/blocking/spec.py builds what JobSpec.to_dict would, and checks what it checks in the model's words."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reckon.daemon.blocking import spec as light
from reckon.model import arrays, jobs, resources
from reckon.model.jobs import JobSpec


def test_the_limits_are_the_models():
    assert (light.MAX_SLOTS, light.MAX_RETRIES, light.MAX_AFTER, light.MAX_TIME_LIMIT) == (
        jobs.MAX_SLOTS, jobs.MAX_RETRIES, jobs.MAX_AFTER, jobs.MAX_TIME_LIMIT)
    assert (light.MAX_MEM, light.MAX_GPUS, light.MAX_GRES_NAMES, light.MAX_GRES_COUNT, light.SIZE_UNITS) == (
        resources.MAX_MEM, resources.MAX_GPUS, resources.MAX_GRES_NAMES, resources.MAX_GRES_COUNT,
        resources._SIZE_UNITS)
    assert (light.MAX_ARRAY_JOBS, light.MAX_ARRAY_INDEX) == (arrays.MAX_ARRAY_JOBS, arrays.MAX_ARRAY_INDEX)


def _model(call, *args):
    try:
        return call(*args)
    except ValueError as exc:
        return f"error: {exc}"


size_text = st.text(alphabet="0123456789.kKmMgGtTbBi \t-x٣", max_size=8) | st.sampled_from(
    ["512M", "4G", "1.5G", "2048", "1.5 GiB", "4gb", "0", "1e3", ".5G", "5.", "1048576T", "1048577T", "٣G"])


@settings(max_examples=200, deadline=None)
@given(size_text)
def test_sizes_parse_as_the_model_parses_them(text):
    assert _model(light.parse_size, text) == _model(resources.parse_size, text)


gres_item = st.text(alphabet="abgpuL1_.-:0+ ", max_size=8) | st.sampled_from(["gpu:1", "lic:x", "fpga", "a" * 65])


@settings(max_examples=200, deadline=None)
@given(st.lists(gres_item, max_size=4))
def test_gres_parse_as_the_model_parses_them(items):
    assert _model(lambda i: [list(p) for p in resources.parse_gres(i)], items) == _model(light.parse_gres, items)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789-:%, \n", max_size=12) | st.sampled_from(
    ["1-100:2%10", "5-1", "0-200000", "7", "1,3,5", "0-15:4", "1-3,7,10-20:5%4", "0-60000,0-60000", "1%2,3"]))
def test_arrays_are_checked_as_the_model_checks_them(text):
    model = _model(arrays.parse_array, text)
    mine = _model(light.check_array, text)
    assert (mine is None) == (not isinstance(model, str)), (mine, model)
    if mine is not None:
        assert mine == model


@pytest.mark.parametrize("fields", [
    {}, {"cpus": 4, "mem": "1.5G", "gpus": 2, "gres": ["lic:2", "fpga"]}, {"mem": 1 << 30},
    {"time_limit": 90.0, "retries": 2, "retry_on_exit": [1, 75], "after": ["3", "4"]},
    {"output": "out-%j", "error": "err-%j", "env": [("A", "1")], "name": "x"}, {"env": {"B": "2"}},
    {"gres": {"lic": 3}},
])
def test_the_dict_is_the_models_wire_form(fields):
    spec = light.job_spec(["/bin/echo", "hi"], cwd="/tmp", **fields)
    assert JobSpec.from_dict(spec).to_dict() == spec


@pytest.mark.parametrize("fields, message", [
    ({"cpus": 0}, "slots must be >= 1, got 0"), ({"gpus": -1}, "gpus must be >= 0, got -1"),
    ({"retries": 1001}, "retries must be <= 1000"), ({"retry_on_exit": [1]}, "retry_on_exit needs retries > 0"),
    ({"time_limit": 0}, "time_limit must be a number of seconds"), ({"after": ["1", "1"]}, "the dependencies name a job twice"),
    ({"mem": "lots"}, "bad size 'lots'"), ({"mem": 0}, "mem must be >= 1"), ({"cpus": True}, "slots must be an integer"),
])
def test_a_bad_field_is_the_models_one_line(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        light.job_spec(["true"], **fields)
    mem = fields.pop("mem", None)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):  # the model says the same
        model_fields = {"slots" if k == "cpus" else k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        JobSpec(name="true", command=("true",), mem=resources.parse_size(mem) if isinstance(mem, str) else mem,
                **model_fields)


def test_an_empty_command_is_refused():
    with pytest.raises(ValueError, match="command must not be empty"):
        light.job_spec([])


def test_what_the_model_alone_checks_the_controller_refuses():
    spec = light.job_spec(["true"], name="", more_field=None)  # the name and an unknown key pass here
    assert spec["name"] == "" and spec["more_field"] is None
    with pytest.raises(ValueError, match="name must not be empty"):
        JobSpec.from_dict(spec)
