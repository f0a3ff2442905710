"""The SmartOS metadata protocol codec: v2 frames, CRC, request ids, malformed input, the v1 fallback."""

from __future__ import annotations

import zlib

import pytest

from cloudnet.wire.mdata_protocol import (
    FAILURE,
    INVALID_COMMAND,
    NOTFOUND,
    SUCCESS,
    V2_OK,
    LineSplitter,
    Reply,
    Request,
    Response,
    V1Reader,
    b64encode,
    crc32_hex,
    parse_put_payload,
    parse_request,
    parse_v2_response,
    put_payload,
    response,
    v1_response,
    v2_request,
    v2_response,
)

RID = b"dc4fae17"


def frame(body: bytes, clen: int | None = None, crc: bytes | None = None) -> bytes:
    return b"V2 %d %s %s" % (len(body) if clen is None else clen, crc or crc32_hex(body), body)


# -- CRC and frames ------------------------------------------------------------------------------


def test_crc_and_frame_match_mdata_client_example() -> None:
    # joyent/mdata-client proto.c: "V2 21 265ae1d8 dc4fae17 SUCCESS W10=" (value "[]").
    assert crc32_hex(b"dc4fae17 SUCCESS W10=") == b"265ae1d8"
    assert v2_response(RID, SUCCESS, b"[]") == b"V2 21 265ae1d8 dc4fae17 SUCCESS W10=\n"


def test_crc_is_zero_padded_lowercase() -> None:
    assert crc32_hex(RID + b" GET YmFy") == b"73a4e256"
    body = next(b"%08x KEYS" % i for i in range(100_000) if zlib.crc32(b"%08x KEYS" % i) < 0x10000000)
    text = crc32_hex(body)
    assert len(text) == 8 and text.startswith(b"0") and text == text.lower()


def test_request_round_trip() -> None:
    line = v2_request(RID, "GET", b"sdc:uuid")
    assert line.endswith(b"\n")
    req = parse_request(line[:-1])
    assert req == Request("GET", b"sdc:uuid", RID)
    assert req.v2


def test_keys_request_has_no_payload() -> None:
    assert parse_request(v2_request(RID, "KEYS")[:-1]) == Request("KEYS", b"", RID)


def test_put_payload_is_two_base64_terms_encoded_again() -> None:
    # reference/metadata.md §2.5: `mdata-put foo bar` sends the frame payload Wm05diBZbUZ5.
    assert b64encode(put_payload("foo", b"bar")) == b"Wm05diBZbUZ5"
    req = parse_request(v2_request(RID, "PUT", put_payload("foo", b"bar"))[:-1])
    assert isinstance(req, Request)
    assert parse_put_payload(req.arg) == ("foo", b"bar")


@pytest.mark.parametrize("arg", [b"Zm9v", b"Zm9v YmFy YmF6", b"Zm9v !!!!", b"", b"//// YmFy"])
def test_put_payload_must_be_two_valid_terms(arg: bytes) -> None:
    assert parse_put_payload(arg) is None


def test_trailing_carriage_return_is_ignored() -> None:
    assert parse_request(v2_request(RID, "GET", b"k")[:-1] + b"\r") == Request("GET", b"k", RID)


# -- what the server drops, and what it refuses ------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        frame(RID + b" GET Zm9v", clen=11),  # length is not the body's
        frame(RID + b" GET Zm9v", clen=0),
        frame(RID + b" GET Zm9v", crc=b"00000000"),  # CRC of something else
        frame(RID + b" GET YmFy", crc=b"73A4E256"),  # the right CRC, not in lowercase
        frame(RID + b" GET Zm9v", crc=crc32_hex(RID + b" GET Zm9v")[1:]),  # not 8 digits
        frame(b"DC4FAE17 GET Zm9v"),  # request id not lowercase hex
        frame(b"dc4fae1 GET Zm9v"),  # request id not 8 digits
        frame(b"dc4fae17x GET Zm9v"),
        frame(b"dc4fae17"),  # no code
        b"V2",
        b"V2 garbage",
        b"V2 12 deadbeef",
        b"V2\t10 deadbeef dc4fae17 KEYS",
    ],
)
def test_malformed_frames_are_dropped(line: bytes) -> None:
    assert parse_request(line) is None


def test_authentic_frame_with_bad_payload_gets_failure() -> None:
    parsed = parse_request(frame(RID + b" GET not-base64!"))
    assert isinstance(parsed, Reply)
    assert parse_v2_response(parsed.data[:-1], RID) == Response(FAILURE, b"Invalid GET Request")


def test_unknown_code_is_a_request_for_the_server_to_refuse() -> None:
    assert parse_request(frame(RID + b" SUCCESS")) == Request("SUCCESS", b"", RID)


# -- v1 and session start ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (b"", INVALID_COMMAND),
        (b"   ", INVALID_COMMAND),
        (b"NEGOTIATE", INVALID_COMMAND),
        (b"GET", INVALID_COMMAND),
        (b"GET   ", INVALID_COMMAND),
        (b"NEGOTIATE V2", V2_OK),
        (b"NEGOTIATE V3", b"FAILURE\n"),
    ],
)
def test_session_start_replies(line: bytes, reply: bytes) -> None:
    assert parse_request(line) == Reply(reply)


def test_v1_requests() -> None:
    assert parse_request(b"GET sdc:uuid") == Request("GET", b"sdc:uuid")
    assert parse_request(b"GET  my key \r") == Request("GET", b"my key")
    assert parse_request(b"KEYS") == Request("KEYS", b"")
    assert parse_request(b"PUT a b") == Request("PUT", b"a b")  # refused by the server: v1 has no writes
    assert not Request("GET", b"x").v2


def test_v1_responses_are_dot_stuffed() -> None:
    value = b".hidden\nplain\n.also\n..two"
    data = v1_response(SUCCESS, value)
    assert data == b"SUCCESS\n..hidden\nplain\n..also\n...two\n.\n"
    reader = V1Reader()
    lines = data.split(b"\n")[:-1]
    results = [reader.feed(line) for line in lines]
    assert results[:-1] == [None] * (len(lines) - 1)
    assert results[-1] == Response(SUCCESS, value)
    assert v1_response(NOTFOUND) == b"NOTFOUND\n"
    assert V1Reader().feed(b"NOTFOUND") == Response(NOTFOUND)
    assert V1Reader().feed(b"FAILURE") == Response(FAILURE)


def test_response_picks_the_request_version() -> None:
    assert response(Request("GET", b"k"), SUCCESS, b"v") == b"SUCCESS\nv\n.\n"
    assert response(Request("GET", b"k", RID), NOTFOUND) == v2_response(RID, NOTFOUND)


# -- client side ---------------------------------------------------------------------------------


def test_v2_response_checks() -> None:
    good = v2_response(RID, SUCCESS, b"value")[:-1]
    assert parse_v2_response(good, RID) == Response(SUCCESS, b"value")
    assert parse_v2_response(good, b"00000000") is None  # another request's answer
    assert parse_v2_response(good.replace(b"SUCCESS", b"SUCCESs"), RID) is None  # CRC no longer matches
    body = RID + b" SUCCESS " + b64encode(b"value")
    assert parse_v2_response(frame(body, clen=len(body) + 1), RID) is None
    assert parse_v2_response(frame(RID + b" BOGUS"), RID) is None
    assert parse_v2_response(frame(RID), RID) is None
    assert parse_v2_response(frame(RID + b" SUCCESS !!!!"), RID) is None
    # An empty value travels without a payload.
    assert v2_response(RID, SUCCESS, b"") == v2_response(RID, SUCCESS)
    assert parse_v2_response(v2_response(RID, SUCCESS)[:-1], RID) == Response(SUCCESS, None)


# -- line splitting ------------------------------------------------------------------------------


def test_lines_across_chunks() -> None:
    s = LineSplitter()
    assert s.feed(b"GET a\n") == [b"GET a"]
    assert s.feed(b"GET") == []
    assert s.feed(b" b\nKE") == [b"GET b"]
    assert s.feed(b"YS\n\nGET c\n") == [b"KEYS", b"", b"GET c"]
    assert s.pending == 0 and s.dropped == 0


def test_over_long_lines_are_dropped_and_the_next_one_read() -> None:
    s = LineSplitter(max_line=16)
    assert s.feed(b"x" * 17 + b"\nGET a\n") == [b"GET a"]
    assert s.dropped == 1
    # One that never ends in time: not buffered past the limit, skipped up to its newline.
    assert s.feed(b"y" * 10) == []
    assert s.feed(b"y" * 10) == []
    assert s.pending == 0 and s.dropped == 2
    assert s.feed(b"y" * 1000) == []
    assert s.feed(b"yyy\nGET b\nGET") == [b"GET b"]
    assert s.feed(b" c\n") == [b"GET c"]
    assert s.feed(b"z" * 17 + b"\n") == []  # the single-line fast path bounds too
    assert s.dropped == 3


def test_a_line_fed_a_byte_at_a_time_is_whole() -> None:
    s = LineSplitter(max_line=4096)
    line = bytes(range(32, 127)) * 40  # 3,800 bytes
    got = [piece for i in range(len(line)) for piece in s.feed(line[i : i + 1])]
    assert got == [] and s.pending == len(line)
    assert s.feed(b"\nGET") == [line]
    assert s.feed(b"\n") == [b"GET"] and s.dropped == 0
