"""``submit_many`` (``reckon submit --file``) through the controller daemon: all the jobs or none.

The daemon hands the whole batch to the model as one ``SubmitBatch`` event
(model/batches.py).  It used to check only admission (``unrunnable_reason``)
itself and then submit job by job, so an entry refused for another reason (an
``--after`` naming an unknown or ended job) left the entries before it submitted.
"""

from __future__ import annotations

import trio

from reckon.model import facts as F
from tests.daemon.trio_harness import SPEC, controller

GUARD = 1_000  # fake seconds; a passing test is far below it


async def test_an_entry_with_a_bad_after_refuses_the_whole_batch(tmp_path, autojump_clock):
    with trio.fail_after(GUARD):
        async with controller(tmp_path) as ctl:
            client, _ = await ctl.connect("/client")
            bad = SPEC.to_dict() | {"after": ["99"]}
            await client.send({"op": "submit_many", "specs": [SPEC.to_dict(), bad, SPEC.to_dict()]})
            reply = await client.receive()
            assert not reply["ok"]
            assert ctl.daemon.model.state.jobs == {}  # not half a batch
            assert reply["error"].startswith("nothing submitted: entry 2 of 3: unknown job '99'"), reply
            assert not any(isinstance(f, F.JobSubmitted) for f in await ctl.store.durable())

            await client.send({"op": "submit_many", "specs": [SPEC.to_dict()] * 3})
            reply = await client.receive()
            assert reply["ok"] and len(reply["jobs"]) == 3
            assert sorted(ctl.daemon.model.state.jobs) == sorted(reply["jobs"])
