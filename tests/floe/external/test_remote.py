"""The remote service's helper: signatures (round trip, tampering, staleness), request checks,
answers, and bounded decompression."""

from __future__ import annotations

import gzip
import json
import math
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from floe.external import CallContext, remote
from floe.external.remote import (
    RemoteRequestError,
    SignatureError,
    build_response,
    json_text,
    parse_request,
)
from floe.external.wire import build_body, compress, request_headers, sign
from tests.floe.external.conftest import remote_function

pytestmark = pytest.mark.unit

KEY = "s3cret-key"
URL = "https://fx.example.com/v1/echo"


def signed_request(api_key: str | None = KEY, compression: str = "AUTO") -> tuple[bytes, dict[str, str]]:
    """A request exactly as Floe's caller builds it."""
    fn = remote_function(URL, api_key=api_key, compression=compression, context_headers=["CURRENT_USER"])
    body = build_body([b'"a"', b"null", b'"\xc3\xbc"'])
    sent, encoding = compress(body, fn)
    headers = request_headers(fn, CallContext("q-9", {"CURRENT_USER": "ALICE"}), "batch-1", encoding)
    return sent, sign(headers, fn, "batch-1", sent)


def test_a_signed_request_round_trips() -> None:
    body, headers = signed_request()
    parsed = parse_request(body, headers, api_key=KEY)
    assert parsed.rows == [[0, "a"], [1, None], [2, "ü"]]
    assert parsed.args == [["a"], [None], ["ü"]]
    assert parsed.row_numbers == [0, 1, 2]
    assert parsed.batch_id == "batch-1"
    assert parsed.query_id == "q-9"
    assert parsed.context == {"CURRENT_USER": "ALICE"}
    # Header names may come in any case.
    assert parse_request(body, {k.upper(): v for k, v in headers.items()}, api_key=KEY).rows == parsed.rows


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "DEFLATE"])
def test_every_compression_is_read(compression: str) -> None:
    body, headers = signed_request(compression=compression)
    assert parse_request(body, headers, api_key=KEY).rows[2] == [2, "ü"]


def test_a_tampered_body_batch_id_or_key_is_refused() -> None:
    body, headers = signed_request(compression="NONE")
    tampered = body.replace(b'"a"', b'"b"')
    with pytest.raises(SignatureError, match="does not match"):
        parse_request(tampered, headers, api_key=KEY)
    with pytest.raises(SignatureError, match="does not match"):
        parse_request(body, {**headers, remote.BATCH_ID_HEADER: "batch-2"}, api_key=KEY)
    with pytest.raises(SignatureError, match="does not match"):
        parse_request(body, headers, api_key="another-key")
    with pytest.raises(SignatureError) as caught:
        parse_request(
            body,
            {
                **headers,
                remote.SIGNATURE_TIMESTAMP_HEADER: str(int(headers[remote.SIGNATURE_TIMESTAMP_HEADER]) + 1),
            },
            api_key=KEY,
        )
    assert caught.value.status == 401


def test_a_stale_or_missing_signature_is_refused() -> None:
    body, headers = signed_request()
    signed_at = int(headers[remote.SIGNATURE_TIMESTAMP_HEADER])
    parse_request(body, headers, api_key=KEY, now=signed_at + 299)
    with pytest.raises(SignatureError, match="301 s old; at most 300 s"):
        parse_request(body, headers, api_key=KEY, now=signed_at + 301)
    with pytest.raises(SignatureError, match="in the future"):
        parse_request(body, headers, api_key=KEY, now=signed_at - 400, tolerance_s=60)
    unsigned_body, unsigned = signed_request(api_key=None)
    assert remote.SIGNATURE_HEADER not in unsigned and "x-api-key" not in unsigned
    with pytest.raises(SignatureError, match="not signed"):
        parse_request(unsigned_body, unsigned, api_key=KEY)
    parse_request(unsigned_body, unsigned)  # a service without a key checks nothing


def test_a_rotated_key_can_be_offered_beside_the_old_one() -> None:
    body, headers = signed_request()
    ts = int(headers[remote.SIGNATURE_TIMESTAMP_HEADER])
    both = f"{remote.signature('old-key', ts, 'batch-1', body)}, {headers[remote.SIGNATURE_HEADER]}"
    parse_request(body, {**headers, remote.SIGNATURE_HEADER: both}, api_key=KEY)


def test_requests_that_are_not_floes_format_are_refused() -> None:
    body, headers = signed_request(api_key=None, compression="NONE")
    for name, value, expected in [
        (remote.FORMAT_HEADER, "xml", "must be json"),
        (remote.FORMAT_VERSION_HEADER, "2.0", "must be 1.0"),
        (remote.BATCH_ID_HEADER, "", "no sf-external-function-query-batch-id"),
    ]:
        with pytest.raises(RemoteRequestError, match=expected):
            parse_request(body, {**headers, name: value})
    for bad, expected in [
        (b"nope", "not JSON"),
        (b'{"data": {}}', '"data" array'),
        (b'{"data": [["0", 1]]}', "row 0 is not an array that starts"),
    ]:
        with pytest.raises(RemoteRequestError, match=expected):
            parse_request(bad, headers)


def test_a_request_body_is_bounded_after_decompression() -> None:
    body, headers = signed_request(api_key=None, compression="NONE")
    bomb = gzip.compress(body + b" " * 100_000)
    with pytest.raises(RemoteRequestError) as caught:
        parse_request(bomb, {**headers, "content-encoding": "gzip"}, max_bytes=10_000)
    assert caught.value.status == 413


def test_numbers_arrive_exact() -> None:
    headers = {remote.FORMAT_HEADER: "json", remote.FORMAT_VERSION_HEADER: "1.0", remote.BATCH_ID_HEADER: "b"}
    parsed = parse_request(b'{"data": [[0, 0.1, 12345678901234567890.5, 7]]}', headers)
    assert parsed.args == [[Decimal("0.1"), Decimal("12345678901234567890.5"), 7]]


def test_build_response_from_pairs_or_from_the_request() -> None:
    assert json.loads(build_response([(0, 1), (1, None)])) == {"data": [[0, 1], [1, None]]}
    body, headers = signed_request(api_key=None)
    parsed = parse_request(body, headers)
    out = json.loads(build_response(parsed, ["x", {"score": 0.5}, [1]]))
    assert out == {"data": [[0, "x"], [1, {"score": 0.5}], [2, [1]]]}
    with pytest.raises(ValueError, match="2 values for 3 rows"):
        build_response(parsed, ["x", "y"])


def test_json_text_writes_values_the_way_floe_does() -> None:
    assert json_text(Decimal("12345678901234567890.000001")) == "12345678901234567890.000001"
    assert [json_text(x) for x in (math.nan, math.inf, -math.inf)] == ['"NaN"', '"inf"', '"-inf"']
    assert json_text(Decimal("-Infinity")) == '"-inf"'
    assert json_text(date(2020, 1, 2)) == '"2020-01-02"'
    assert json_text(datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)) == '"2020-01-02T03:04:05.000000+00:00"'
    assert json_text(b"\x01\xff") == '"01FF"'
    assert json_text({"a": (1, True, None)}) == '{"a":[1,true,null]}'
    with pytest.raises(TypeError):
        json_text({1: "a"})
    with pytest.raises(TypeError):
        json_text(object())
