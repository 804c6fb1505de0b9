"""One batch on the wire: batching by rows and bytes, bodies, batch ids, headers, and the checks
an answer must pass."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from floe.external import CallContext, remote
from floe.external.wire import (
    ProtocolViolation,
    batch_id,
    build_body,
    compress,
    decode_answer,
    plan_batches,
    request_headers,
    retry_after,
    sign,
)
from tests.floe.external.conftest import remote_function

pytestmark = pytest.mark.unit

URL = "https://fx.example.com/v1/echo"
CTX = CallContext(query_id="q-1", context={"CURRENT_USER": "ALICE", "CURRENT_ROLE": "SYSADMIN"})


# ------------------------------------------------------------------------------------------------
# Batches and bodies


def test_batches_are_cut_by_rows() -> None:
    assert plan_batches([1] * 10, max_rows=4, max_bytes=1 << 20) == [range(0, 4), range(4, 8), range(8, 10)]
    assert plan_batches([], max_rows=4, max_bytes=1 << 20) == []


def test_batches_are_cut_by_bytes_and_every_body_stays_within_them() -> None:
    sizes = [100, 250, 30, 400, 5, 5, 5, 300]
    args = [b'"' + b"x" * (size - 2) + b'"' for size in sizes]
    limit = 600
    plan = plan_batches([len(a) for a in args], max_rows=1000, max_bytes=limit)
    assert [i for span in plan for i in span] == list(range(len(sizes)))
    assert len(plan) > 1
    for span in plan:
        body = build_body(args[span.start : span.stop])
        assert len(body) <= limit, "the size estimate must match the body built"
        if span.stop < len(sizes):
            # A batch is cut only when the next row would not fit.
            assert len(build_body(args[span.start : span.stop + 1])) > limit


def test_a_row_larger_than_the_byte_bound_goes_alone() -> None:
    assert plan_batches([10, 5000, 10], max_rows=100, max_bytes=1000) == [
        range(0, 1),
        range(1, 2),
        range(2, 3),
    ]


def test_the_body_is_the_seeds_format_with_0_based_row_numbers() -> None:
    body = build_body([b'10,"Alex"', b'20,"Steve"'])
    assert json.loads(body) == {"data": [[0, 10, "Alex"], [1, 20, "Steve"]]}
    assert json.loads(build_body([b"", b""])) == {"data": [[0], [1]]}


def test_batch_ids_are_deterministic_and_differ_by_query_position_call_and_rows() -> None:
    fn = remote_function(URL)
    body = build_body([b'"a"'])
    first = batch_id(fn, CTX, 0, body)
    assert first == batch_id(fn, CTX, 0, body)  # a replay sends the same id
    others = {
        batch_id(fn, CTX, 1, body),
        batch_id(fn, CallContext(query_id="q-2"), 0, body),
        batch_id(fn, CallContext(query_id="q-1", call_id="file-2"), 0, body),
        batch_id(fn, CTX, 0, build_body([b'"b"'])),
        batch_id(remote_function(URL + "2"), CTX, 0, body),
    }
    assert first not in others and len(others) == 5


# ------------------------------------------------------------------------------------------------
# Headers, compression and signing


def test_headers_carry_the_protocol_the_functions_headers_and_context() -> None:
    fn = remote_function(
        URL,
        headers=[
            ("x-model", "v2"),
            ("content-length", "1"),
            ("sf-external-function-query-batch-id", "forged"),
        ],
        context_headers=["CURRENT_USER", "CURRENT_ROLE"],
        api_key="k3y",
    )
    headers = request_headers(fn, CTX, "b-1", "gzip")
    assert headers[remote.FORMAT_HEADER] == "json"
    assert headers[remote.FORMAT_VERSION_HEADER] == "1.0"
    assert headers[remote.QUERY_ID_HEADER] == "q-1"
    assert headers[remote.BATCH_ID_HEADER] == "b-1"  # the protocol's headers win over HEADERS
    assert headers["x-model"] == "v2"
    assert "content-length" not in headers
    assert headers["sf-context-current-user"] == "ALICE"
    assert headers["sf-context-current-role"] == "SYSADMIN"
    assert headers["x-api-key"] == "k3y"
    assert headers["content-encoding"] == headers["accept-encoding"] == "gzip"
    plain = request_headers(remote_function(URL, compression="NONE"), CTX, "b-1", None)
    assert "content-encoding" not in plain and plain["accept-encoding"] == "identity"
    assert "x-api-key" not in plain
    with pytest.raises(ValueError, match="CURRENT_WAREHOUSE"):
        request_headers(remote_function(URL, context_headers=["CURRENT_WAREHOUSE"]), CTX, "b", None)


def test_compression_follows_the_function() -> None:
    body = build_body([b'"abc"'] * 100)
    sent, encoding = compress(body, remote_function(URL))  # AUTO
    assert encoding == "gzip" and gzip.decompress(sent) == body
    sent, encoding = compress(body, remote_function(URL, compression="DEFLATE"))
    assert encoding == "deflate" and zlib.decompress(sent) == body
    assert compress(body, remote_function(URL, compression="NONE")) == (body, None)


def test_requests_are_signed_only_when_the_integration_has_an_api_key() -> None:
    body = b"{}"
    assert sign({"a": "b"}, remote_function(URL), "b-1", body) == {"a": "b"}
    signed = sign({"a": "b"}, remote_function(URL, api_key="k"), "b-1", body)
    ts = int(signed[remote.SIGNATURE_TIMESTAMP_HEADER])
    assert signed[remote.SIGNATURE_HEADER] == remote.signature("k", ts, "b-1", body)


def test_retry_after_takes_seconds_or_a_date() -> None:
    assert retry_after("3") == 3.0
    assert retry_after(None) is None
    assert retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


# ------------------------------------------------------------------------------------------------
# Answers


def answer(doc: object) -> bytes:
    return json.dumps(doc).encode()


def violation(raw: bytes, rows: int = 2, encoding: str | None = None, limit: int = 1 << 20) -> str:
    with pytest.raises(ProtocolViolation) as caught:
        decode_answer(raw, encoding, rows, limit)
    message = str(caught.value)
    assert "SECRET" not in message, "an answer's content must never reach a message"
    return message


def test_a_valid_answer_gives_one_value_per_row_in_order() -> None:
    raw = answer({"data": [[0, "SECRET-a"], [1, {"k": [1, 2]}]]})
    assert decode_answer(raw, None, 2, 1 << 20) == ["SECRET-a", {"k": [1, 2]}]
    assert decode_answer(gzip.compress(raw), "gzip", 2, 1 << 20)[0] == "SECRET-a"
    assert decode_answer(zlib.compress(raw), "deflate", 2, 1 << 20)[0] == "SECRET-a"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"SECRET not json", "the response body is not JSON"),
        (b'{"data": [[0, NaN], [1, 1]]}', "the response body is not JSON"),
        (answer(["SECRET"]), 'not a JSON object with a "data" array'),
        (answer({"rows": [[0, "SECRET"]]}), 'not a JSON object with a "data" array'),
        (answer({"data": [[0, "SECRET"]]}), "the response has 1 rows; 2 were sent"),
        (answer({"data": [[0, "SECRET"], [1, 1], [2, 2]]}), "the response has 3 rows; 2 were sent"),
        (answer({"data": [[1, "SECRET"], [0, "SECRET"]]}), "response row 0 does not have row number 0"),
        (answer({"data": [[0, "SECRET", "SECRET"], [1, 1]]}), "response row 0 has 2 values"),
        (answer({"data": [[0, 1], [1]]}), "response row 1 has 0 values"),
        (answer({"data": [[0, 1], "SECRET"]}), "response row 1 is not an array"),
        (answer({"data": [[0, 1], []]}), "response row 1 is not an array"),
        (answer({"data": [[0, 1], ["SECRET", 1]]}), "response row 1 does not start with a row number"),
        (answer({"data": [[0, 1], [True, 1]]}), "response row 1 does not start with a row number"),
        (answer({"data": [[0, 1], [1.0, 1]]}), "response row 1 does not start with a row number"),
    ],
)
def test_answers_that_break_the_protocol_fail_with_what_was_wrong(raw: bytes, expected: str) -> None:
    assert expected in violation(raw)


def test_answers_are_bounded_after_decompression() -> None:
    bomb = gzip.compress(answer({"data": [[0, "SECRET" + "x" * 10_000], [1, 1]]}))
    assert len(bomb) < 1000
    assert "larger than 1000 bytes" in violation(bomb, encoding="gzip", limit=1000)
    assert "does not decode as Content-Encoding gzip" in violation(b"SECRET", encoding="gzip")
    assert "does not decode as Content-Encoding br" in violation(b"SECRET", encoding="br")
