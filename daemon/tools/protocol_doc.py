"""Render the protocol reference from the model itself, so docs/protocol.md cannot drift.

The state machines come from ``JOB_TRANSITIONS``, ``ROUND_TRANSITIONS``,
``AGENT_SESSION_TRANSITIONS`` and ``SESSION_TRANSITIONS`` plus the comment on each enum member; the message
reference comes from the message dataclasses (their fields, defaults, field
comments and docstrings).  Rendering is a pure function of the model's code;
the only thing it reads is the model's own source text (``inspect``), for the
comments.

    python -m reckon.daemon.tools.protocol_doc                           # print every generated block
    python -m reckon.daemon.tools.protocol_doc --write docs/protocol.md  # refresh the blocks in place
    python -m reckon.daemon.tools.protocol_doc --check docs/protocol.md  # exit 1 if they are stale
"""

from __future__ import annotations

import ast
import enum
import inspect
import io
import re
import textwrap
import tokenize
from dataclasses import MISSING, fields
from typing import Callable, Mapping

from reckon.model import messages as M
from reckon.model.agent import REFUSAL_RETRY, SESSION_TRANSITIONS, Agent, AgentConfig, SessionEvent, SessionState
from reckon.model.jobs import JOB_TRANSITIONS, TERMINAL_STATES, JobRecord, JobState, JobTransition
from reckon.model.output_paths import PATTERN_ESCAPES
from reckon.model.resync import ROUND_END_STATES, ROUND_TRANSITIONS, ResyncRound, RoundEvent, RoundState
from reckon.model.session import AGENT_SESSION_TRANSITIONS, AgentSession, AgentSessionEvent, AgentSessionState

BEGIN = "<!-- BEGIN GENERATED: {name} -->"
END = "<!-- END GENERATED -->"


# ---- comments from source ------------------------------------------------------------


def comments_in_class(source: str) -> dict[str, str]:
    """``name -> trailing comment`` for every assignment in the first class of ``source``."""
    source = textwrap.dedent(source)
    tree = ast.parse(source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    by_line = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    out: dict[str, str] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            continue
        comment = by_line.get(node.lineno) or by_line.get(node.end_lineno or node.lineno)
        if comment:
            out[name] = comment
    return out


def _comments(cls: type) -> dict[str, str]:
    return comments_in_class(inspect.getsource(cls))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__")
    if not doc or doc.startswith(f"{cls.__name__}("):  # none, or the signature dataclasses make up
        return ""
    return " ".join(inspect.cleandoc(doc).split())


# ---- state machines ---------------------------------------------------------------------


def render_machine(title: str, table: Mapping[tuple[enum.Enum, enum.Enum], enum.Enum], states: type[enum.Enum],
                   events: type[enum.Enum], initial: enum.Enum, final: frozenset, *, table_name: str,
                   event_word: str = "event") -> str:
    """One machine: its states, its events, its transition table and a mermaid diagram."""
    state_notes, event_notes = _comments(states), _comments(events)
    lines = [f"### {title}", "", f"States (`{states.__name__}`); the machine starts in `{initial.name}`:", "",
             "| state | end state | meaning |", "| --- | --- | --- |"]
    for s in states:
        lines.append(f"| `{s.name}` | {'yes' if s in final else ''} | {_cell(state_notes.get(s.name, ''))} |")
    lines += ["", f"{event_word.capitalize()}s (`{events.__name__}`):", "", f"| {event_word} | meaning |",
              "| --- | --- |"]
    for e in events:
        lines.append(f"| `{e.value}` | {_cell(event_notes.get(e.name, ''))} |")
    lines += ["", f"The table (`{table_name}`); any pair not listed is a protocol error that changes nothing:",
              "", f"| from | {event_word} | to |", "| --- | --- | --- |"]
    for (src, ev), dst in table.items():
        lines.append(f"| `{src.name}` | `{ev.value}` | `{dst.name}` |")
    lines += ["", "```mermaid", "stateDiagram-v2", f"    [*] --> {initial.name}"]
    for (src, ev), dst in table.items():
        lines.append(f"    {src.name} --> {dst.name} : {ev.value}")
    for s in states:
        if s in final:
            lines.append(f"    {s.name} --> [*]")
    lines += ["```", ""]
    return "\n".join(lines)


def render_state_tables() -> str:
    """The job, resync round and both sides' agent session machines, straight from their tables."""
    job_initial = JobRecord.__dataclass_fields__["state"].default
    round_initial = ResyncRound.__dataclass_fields__["state"].default
    link_initial = AgentSession.__dataclass_fields__["state"].default
    session_initial = Agent(AgentConfig(name="doc", slots=0)).session
    return "\n".join([
        render_machine("Job", JOB_TRANSITIONS, JobState, JobTransition, job_initial, TERMINAL_STATES,
                       table_name="model.jobs.JOB_TRANSITIONS", event_word="transition"),
        render_machine("Resync round (controller side)", ROUND_TRANSITIONS, RoundState, RoundEvent, round_initial,
                       ROUND_END_STATES, table_name="model.resync.ROUND_TRANSITIONS"),
        render_machine("Agent session (controller side)", AGENT_SESSION_TRANSITIONS, AgentSessionState,
                       AgentSessionEvent, link_initial, frozenset(),
                       table_name="model.session.AGENT_SESSION_TRANSITIONS"),
        render_machine("Agent session (agent side)", SESSION_TRANSITIONS, SessionState, SessionEvent, session_initial,
                       frozenset(), table_name="model.agent.SESSION_TRANSITIONS"),
    ]).rstrip("\n") + "\n"


# ---- messages --------------------------------------------------------------------------------


def _default(f: object) -> str:
    default = getattr(f, "default")
    if default is MISSING:
        return "required"
    return f"`{default!r}`"


def render_message(cls: type) -> str:
    notes = _comments(cls)
    lines = [f"#### `{cls.TYPE}` (`{cls.__name__}`)", ""]  # type: ignore[attr-defined]
    if _doc(cls):
        lines += [_doc(cls), ""]
    lines += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in fields(cls):
        lines.append(f"| `{f.name}` | `{_cell(str(f.type))}` | {_default(f)} | {_cell(notes.get(f.name, ''))} |")
    return "\n".join(lines) + "\n"


def _render_enum(cls: type[enum.Enum]) -> str:
    notes = _comments(cls)
    lines = [f"`{cls.__name__}`:", "", "| value | meaning |", "| --- | --- |"]
    lines += [f"| `{m.value}` | {_cell(notes.get(m.name, ''))} |" for m in cls]
    return "\n".join(lines) + "\n"


def _render_refusals() -> str:
    """The refusal codes with what the agent model does after each (model.agent.REFUSAL_RETRY)."""
    notes = _comments(M.RefusalCode)
    lines = ["`RefusalCode` (version 5), with the agent's answer (`model.agent.REFUSAL_RETRY`):", "",
             "| value | meaning | fatal | permanent | the agent |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{c.value}` | {_cell(notes.get(c.name, ''))} | {'no' if c in M.NOT_FATAL_REFUSALS else 'yes'} | "
              f"{'yes' if c in M.PERMANENT_REFUSALS else 'no'} | `{REFUSAL_RETRY[c].value}` |" for c in M.RefusalCode]
    lines += ["", f"The controller sends `code` to agents that joined with version {M.REFUSAL_CODES_SINCE} or "
              f"later, and `permanent` to those of version {M.PERMANENT_SINCE} or later.  An error without a "
              "code (an older controller; a frame the controller's daemon cannot decode) is answered from its "
              "other fields: `leader` set: `retry_now`; `permanent`: `never`; fatal: `back_off` (`never` when "
              "an older controller's decoder refuses this agent's `unknown fields`); else `carry_on`."]
    return "\n".join(lines) + "\n"


_PATTERN_MEANINGS = {"j": "the job id", "a": "the attempt number", "%": "a literal `%`",
                     "A": "the array's id (the job id for a job not in an array; version 7)",
                     "I": "the index in its array (`4294967294` for a job not in an array, as Slurm; version 7)",
                     "x": "the job's name (version 7)", "u": "the user it runs as (version 7)",
                     "N": "the agent's short host name (version 7)"}
assert set(_PATTERN_MEANINGS) == set(PATTERN_ESCAPES)


def render_message_tables() -> str:
    """Every wire message, both directions, with its fields."""
    entry = M.ReportEntry
    parts = [
        f"Protocol version {M.PROTOCOL_VERSION}; round tokens are {M.TOKEN_BYTES} bytes; "
        f"a page holds at most {M.MAX_PAGE_ENTRIES} entries.",
        "",
        "A submission's `uid` (version 3, random, drawn by the controller daemon at submit) "
        "is left out of a message while it is null, so a peer of an older version decodes the "
        "message as before; the controller sends uids only to agents that joined with version "
        f"{M.UIDS_SINCE} or later.",
        "",
        "### Agent → controller",
        "",
    ]
    parts += [render_message(cls) for cls in M.TO_CONTROLLER.values()]
    parts += ["### Controller → agent", ""]
    parts += [render_message(cls) for cls in M.TO_AGENT.values()]
    parts += [
        "### Report entries and enumerations",
        "",
        "A `resync_report` entry travels as the list "
        f"`[{', '.join(f.name for f in fields(entry))}]`; `uid` is there only when it is set "
        "or `timed_out` follows (7 items without both, as before version 3), `timed_out` only "
        "when it is true (version 4; then `uid` may be null).",
        "",
        _render_enum(M.EntryStatus),
        _render_enum(M.AckOutcome),
        _render_enum(M.OutputStream),
        _render_enum(M.OutputStatus),
        _render_refusals(),
        "### Job output (version 4)",
        "",
        f"`output_read` is sent only to agents that joined with version {M.OUTPUT_SINCE} or later; an "
        "agent answers each with one `output_chunk` of the same `request`, of at most "
        f"{M.MAX_OUTPUT_CHUNK} bytes.  A job spec may carry `output` and `error`, path patterns for the "
        "job's stdout and stderr on the agent (left out of the spec while unset, so older agents and "
        "the fact log see it as before; an older agent ignores them).  Pattern escapes:",
        "",
        "| escape | stands for |",
        "| --- | --- |",
        *[f"| `%{k}` | {v} |" for k, v in _PATTERN_MEANINGS.items()],
    ]
    return "\n".join(parts).rstrip("\n") + "\n"


GENERATED: dict[str, Callable[[], str]] = {
    "state tables": render_state_tables,
    "messages": render_message_tables,
}


# ---- splicing into a document ------------------------------------------------------------------


def _block_re(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(BEGIN.format(name=name)) + r"\n(.*?)" + re.escape(END), re.S)


def extract(document: str, name: str) -> str:
    """The current text of generated block ``name`` in ``document``."""
    match = _block_re(name).search(document)
    if match is None:
        raise ValueError(f"no generated block {name!r} in the document")
    return match.group(1)


def splice(document: str, blocks: Mapping[str, str] | None = None) -> str:
    """``document`` with every named generated block replaced by fresh output."""
    blocks = blocks if blocks is not None else {name: render() for name, render in GENERATED.items()}
    for name, text in blocks.items():
        extract(document, name)  # raises if the markers are missing
        document = _block_re(name).sub(lambda _m, n=name, t=text: f"{BEGIN.format(name=n)}\n{t}{END}", document)
    return document


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("--write", "--check"):
        with open(argv[1], encoding="utf-8") as fh:
            current = fh.read()
        fresh = splice(current)
        if argv[0] == "--check":
            return 0 if fresh == current else 1
        if fresh != current:
            with open(argv[1], "w", encoding="utf-8") as fh:
                fh.write(fresh)
        return 0
    if argv:
        print(__doc__)
        return 2
    for name, render in GENERATED.items():
        print(f"{BEGIN.format(name=name)}\n{render()}{END}\n")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
