"""The controller's job id mark: a small file next to ``controller.db``, outside it.

It says up to which job id the controller may have issued ids (a block
ahead: ``model.startup``).  It is written (temporary file, fsync, rename,
fsync of the directory) before any fact that issues an id above the old mark
is committed, so a copy of ``controller.db`` restored from a backup is behind
it, and the controller continues ids above it.  A backup/restore is of
``controller.db*``; this file stays where it is.

It also says how far the fact log went (``facts``, a fact position):
rewritten after each batch's commit and durable before anything the batch
caused is released, so a copy of ``controller.db`` taken while the controller ran (an
online backup) ends before it and is recognised as older at the next start.
A file from before has no ``facts`` (read as 0: no comparison).

While a start on a restored copy holds dispatch for the whole grace it also
says ``hold``: that start raised the mark and grew the log, so a restart
before the grace ended would otherwise not see the copy any more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from reckon.model.events import IdMark

from reckon.daemon.store.sqlite_thread import StoreError

ID_MARK_FILE = "id-mark"


class BadIdMark(Exception):
    """The id mark file exists but cannot be read: the controller does not start on a guess."""


def read_id_mark(state_dir: Path) -> IdMark | None:
    """The mark in ``state_dir``, or None when there is no file."""
    path = state_dir / ID_MARK_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        return IdMark(cluster=data["cluster"], upto=data["upto"], facts=data.get("facts", 0),
                      hold=data.get("hold", False))  # validated there
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadIdMark(f"{path} is unreadable ({exc}); it should hold "
                        f'{{"cluster": ..., "upto": ..., "facts": ...}}: restore it, or remove it to start '
                        f"without it") from None


def write_id_mark(state_dir: Path, mark: IdMark) -> None:
    """Replace the mark durably: after this returns, a crash leaves the new mark (or, before, the old one).

    A failure (a full disk, a read-only or wrong directory) is a ``StoreError`` with one line: the
    controller stops rather than release what it could not record (the CLI prints the line)."""
    try:
        _write_id_mark(state_dir, mark)
    except OSError as exc:
        raise StoreError(f"{state_dir / ID_MARK_FILE}: cannot write the id mark file: {exc.strerror or exc} "
                         f"(a full disk?); the controller stops rather than release what it cannot "
                         f"record: free space and start it again") from exc


def _write_id_mark(state_dir: Path, mark: IdMark) -> None:
    path = state_dir / ID_MARK_FILE
    tmp = path.with_name(ID_MARK_FILE + ".tmp")
    fields = {"cluster": mark.cluster, "upto": mark.upto, "facts": mark.facts}
    if mark.hold:
        fields["hold"] = True  # only while a restored copy's whole-grace hold lasts
    data = json.dumps(fields).encode() + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)

