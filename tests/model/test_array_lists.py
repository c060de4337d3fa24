"""Slurm's ``--array`` lists and steps (issue #21): ``1,3,5``, ``0-15:4``, ``1-3,7,10-20:5%4``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.harness import Harness

from reckon.model import events as E
from reckon.model import facts as F
from reckon.model.arrays import MAX_ARRAY_JOBS, ArrayRange, parse_array
from reckon.model.jobs import JobSpec

# One item of a list: (first, how many more, step, written with a step?)
item = st.tuples(st.integers(0, 300), st.integers(0, 20), st.integers(1, 7), st.booleans())


def _text(items: list[tuple[int, int, int, bool]], limit: int | None) -> str:
    words = []
    for first, more, step, stepped in items:
        last = first + more * step
        words.append(f"{first}-{last}:{step}" if stepped else (f"{first}-{first + more}" if more else str(first)))
    return ",".join(words) + (f"%{limit}" if limit is not None else "")


def _reference(items: list[tuple[int, int, int, bool]]) -> list[int]:
    """Slurm's bitmap: every index of every item, once, increasing."""
    out: set[int] = set()
    for first, more, step, stepped in items:
        out.update(range(first, first + more * step + 1, step) if stepped else range(first, first + more + 1))
    return sorted(out)


@settings(max_examples=100, deadline=None)
@given(st.lists(item, min_size=1, max_size=6), st.none() | st.integers(1, 50))
def test_a_list_names_the_indices_slurm_names(items, limit):
    text = _text(items, limit)
    array = parse_array(text)
    assert list(array.indices()) == _reference(items) and array.count == len(_reference(items))
    assert array.max_running == limit
    assert (array.start, array.end) == (_reference(items)[0], _reference(items)[-1])
    steps = [step for _, _, step, stepped in items if stepped]
    assert array.step == (steps[0] if steps else 1)  # SLURM_ARRAY_TASK_STEP: the text's first :STEP
    if len(items) == 1:  # one range stays the plain form
        assert array.listed is None


def test_examples_and_refusals():
    assert list(parse_array("1,3,5").indices()) == [1, 3, 5]
    assert list(parse_array("0-15:4").indices()) == [0, 4, 8, 12] and parse_array("0-15:4").listed is None
    r = parse_array("1-3,7,10-20:5%4")
    assert list(r.indices()) == [1, 2, 3, 7, 10, 15, 20] and r.max_running == 4 and r.step == 5
    assert list(parse_array("3,1,1").indices()) == [1, 3]
    for bad in ("1,,2", ",1", "1,", "1%2,3", "1,5-2", "1,2:3", "1,2%", "1,2%0"):
        with pytest.raises(ValueError):
            parse_array(bad)
    with pytest.raises(ValueError, match=f"at most {MAX_ARRAY_JOBS} jobs, 120000 asked"):
        parse_array("0-59999,0-59999")  # held before overlaps merge: no huge set is built
    with pytest.raises(ValueError, match="must increase"):
        ArrayRange(start=1, end=3, listed=(3, 1))
    with pytest.raises(ValueError, match="first and last"):
        ArrayRange(start=0, end=3, listed=(1, 3))


def test_a_listed_array_submits_one_job_per_index_with_slurms_shape():
    h = Harness(slots=16)
    h.join("a1")
    spec = JobSpec(name="a", command=("true",), slurm_env=True)
    before = len(h.log)
    h.controller_handle(E.SubmitArray(spec=spec, array=parse_array("1-3,7,10-20:5%4"), now=h.now))
    submitted = [f for f in h.log[before:] if isinstance(f, F.JobSubmitted)]
    assert [f.spec.array_index for f in submitted] == [1, 2, 3, 7, 10, 15, 20]
    first = submitted[0].job
    assert h.controller.state.arrays[first] == [f.job for f in submitted]
    for f in submitted:
        env = dict(f.spec.env)
        assert f.spec.array_max == 4 and f.spec.array_id == first
        assert (env["SLURM_ARRAY_TASK_COUNT"], env["SLURM_ARRAY_TASK_MIN"], env["SLURM_ARRAY_TASK_MAX"],
                env["SLURM_ARRAY_TASK_STEP"]) == ("7", "1", "20", "5")
    running = [j for j in h.controller.state.jobs.values() if j.state.value == "RUNNING"]
    assert len(running) <= 4  # %4 holds for the whole array
