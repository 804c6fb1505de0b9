"""Issue 9, item 8: bodies buffered before authentication.

A 512 MB POST without a token once took the API from 277 MB to 1,254 MB RSS before it answered
401. Now the API checks the token before it reads a byte of the body, and refuses an authenticated
body over ``api.max_body_bytes`` with 413 while reading it; /health keeps answering while the body
is still being sent, with no stall inside any request (``HealthWatch.check``).
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Stack
from tests.security.attacks.caller import SqlCaller, watching_health
from tests.security.attacks.http import MB, Flood, memory, post_flood

pytestmark = pytest.mark.e2e


def insert_files_url(caller: SqlCaller) -> str:
    return f"{caller.url}/v1/data/pipes/FLOE.PUBLIC.{caller.user}_PIPE/insertFiles"


def test_an_unauthenticated_512_mb_post_is_refused_unread(stack: Stack, mallory: SqlCaller) -> None:
    pid = stack.procs["api"].pid
    before = memory(pid)

    def attack() -> tuple[Flood, httpx.Response]:
        flood = Flood(512 * MB)
        return flood, watch.attack(post_flood, insert_files_url(mallory), flood, {}, declare_length=True)

    with watching_health(mallory.url) as watch:
        answers = watch.until_answered(attack, rounds=3)
    after = memory(pid)
    for flood, resp in answers:
        assert flood.sent == flood.total, "the client did not send the whole body"
        assert resp.status_code == 401, resp.text
        assert set(resp.json()) == {"code", "success", "message", "data"}
    grew, peak_grew = after["VmRSS"] - before["VmRSS"], after["VmHWM"] - before["VmHWM"]
    assert grew < 64 * MB and peak_grew < 64 * MB, (before, after)
    # The process reads (or discards) the body on the event loop that answers /health too.
    watch.check("the body was being sent")


def test_an_authenticated_oversized_post_gets_413(stack: Stack, mallory: SqlCaller) -> None:
    limit = stack.settings.api.max_body_bytes
    pid = stack.procs["api"].pid
    before = memory(pid)

    def attack() -> list[tuple[bool, httpx.Response]]:
        answers = []
        for declare_length in (True, False):
            flood = Flood(4 * limit)
            url = insert_files_url(mallory)
            answers.append(
                (declare_length, watch.attack(post_flood, url, flood, mallory.headers(), declare_length))
            )
        return answers

    with watching_health(mallory.url) as watch:
        rounds = watch.until_answered(attack, rounds=10)
    after = memory(pid)
    for declare_length, resp in (answer for answers in rounds for answer in answers):
        assert resp.status_code == 413, (declare_length, resp.text)
        body = resp.json()
        assert body["code"] == "390413" and str(limit) in body["message"], body
    assert after["VmHWM"] - before["VmHWM"] < 2 * limit + 32 * MB, (before, after)
    # The process reads (or discards) the body on the event loop that answers /health too.
    watch.check("the body was being sent")
