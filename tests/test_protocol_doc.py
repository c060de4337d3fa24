"""docs/protocol.md's generated blocks must equal what the model renders today.

Regenerate with ``python -m reckon.daemon.tools.protocol_doc --write docs/protocol.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reckon.daemon.tools import protocol_doc as docs
from reckon.model.jobs import JOB_TRANSITIONS, JobState, JobTransition

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"
HINT = "docs/protocol.md is stale: run `python -m reckon.daemon.tools.protocol_doc --write docs/protocol.md`"


@pytest.mark.parametrize("name", sorted(docs.GENERATED))
def test_generated_block_matches_the_model(name: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert docs.extract(text, name) == docs.GENERATED[name](), HINT


def test_doc_is_exactly_what_the_writer_would_write() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert docs.splice(text) == text, HINT


def test_every_table_row_is_rendered() -> None:
    rendered = docs.render_state_tables()
    for (src, ev), dst in JOB_TRANSITIONS.items():
        assert f"| `{src.name}` | `{ev.value}` | `{dst.name}` |" in rendered
        assert f"    {src.name} --> {dst.name} : {ev.value}" in rendered
    assert "| `PENDING` |  | waiting for the scheduler; owned by no agent |" in rendered


def test_the_check_bites_when_the_table_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    before = docs.render_state_tables()
    monkeypatch.setitem(JOB_TRANSITIONS, (JobState.COMPLETED, JobTransition.REQUEUE), JobState.PENDING)
    after = docs.render_state_tables()
    assert after != before and "| `COMPLETED` | `requeue` | `PENDING` |" in after
    assert docs.extract(DOC.read_text(encoding="utf-8"), "state tables") != after


def test_splice_refuses_a_document_without_markers() -> None:
    with pytest.raises(ValueError, match="no generated block"):
        docs.splice("# a page without markers\n")


def test_comments_in_class_reads_trailing_comments() -> None:
    source = "class X:\n    A = 1  # first\n    b: int = 2  # second | piped\n    c: str\n"
    assert docs.comments_in_class(source) == {"A": "first", "b": "second | piped"}
