"""Request ids as the API takes them from a client, the agent joins them, the logs and `cloudnet monitor` show
them: nothing a client sends reaches a log line or a terminal unbounded or unescaped."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest

from cloudnet.cli.errors import ApiError
from cloudnet.cli.monitor import line
from cloudnet.cni.errors import CniError
from cloudnet.wire import http1, logs, request_ids


def test_well_formed_ids_are_kept_and_others_replaced() -> None:
    for kept in ("req-0e6c4b9e-5d1a-4e0b-8a53-3f2c8e9a7b10", "trace.42_b", "a", "A" * 64):
        assert request_ids.from_headers([(b"x-openstack-request-id", kept.encode())]) == kept
    for bad in (b"", b"a" * 65, b"two words", b"x\r\nInjected: 1", b'"q"', b"-x", b"\xc3\xa9t\xc3\xa9", b"a/b"):
        made = request_ids.from_headers([(b"x-openstack-request-id", bad)])
        assert made.startswith("req-") and len(made) == 40, bad
    # OpenStack's header first, then X-Request-ID; a malformed first one does not hide a good second one.
    both = [(b"x-request-id", b"second"), (b"x-openstack-request-id", b"first")]
    assert request_ids.from_headers(both) == "first"
    assert request_ids.from_headers([(b"x-openstack-request-id", b"bad id"), (b"x-request-id", b"ok")]) == "ok"


def test_a_pass_joins_its_ids_boundedly() -> None:
    assert request_ids.joined([]) is None
    assert request_ids.joined(["a", "b", "a"]) == "a,b"
    assert request_ids.joined([f"r{i}" for i in range(20)], most=3) == "r0,r1,r2,+17"


def records(fmt: logs.LogFormat) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger(f"cloudnet.test.{fmt}")
    logger.propagate = False
    logger.addHandler(logs.handler(fmt, out))
    return logger, out


def test_lines_carry_the_context_id_as_text_and_json() -> None:
    logger, out = records("json")
    token = request_ids.current.set("req-1")
    try:
        logger.warning("two\nlines %s", '"quoted"')
    finally:
        request_ids.current.reset(token)
    logger.warning("outside")
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert (first["request_id"], first["message"], first["level"]) == ("req-1", 'two\nlines "quoted"', "WARNING")
    assert second["request_id"] is None
    logger, out = records("text")
    token = request_ids.current.set("req-2")
    try:
        logger.info("x")
        logger.error("y")
    finally:
        request_ids.current.reset(token)
    assert out.getvalue().splitlines()[-1].endswith("ERROR cloudnet.test.text [req-2]: y")


def test_monitor_lines_escape_what_they_show() -> None:
    event = {"created_at": "2026-11-29T03:00:00Z", "type": "port.failed", "resource": "port", "resource_id": "p1",
             "project_id": "alice", "request_id": "req-1", "detail": "bad\n\x1b[31mred" + "x" * 500}  # fmt: skip
    shown = line(event)
    assert shown.startswith("2026-11-29T03:00:00Z port.failed port p1 project=alice request=req-1: bad\\n\\x1b[31mred")
    assert "\n" not in shown and "\x1b" not in shown and len(shown) < 420


def test_the_writer_thread_gets_records_ready_to_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """What crosses to the writer thread (`logs.setup`): the id of the thread that logged, the exception's text; a
    writer too far behind loses lines and is told how many."""
    monkeypatch.setattr(logs.Handoff, "MAX_BEHIND", 2)
    handoff = logs.Handoff()
    handoff.addFilter(logs.RequestIdFilter())
    logger = logging.getLogger("cloudnet.test.handoff")
    logger.propagate = False
    logger.addHandler(handoff)
    token = request_ids.current.set("req-x")
    try:
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed %s", "here")
    finally:
        request_ids.current.reset(token)
    logger.warning("second")
    logger.warning("third: dropped")
    out = io.StringIO()
    writer = logs.handler("json", out, tag=False)  # (as the writer thread has it: no context of its own)
    for _ in range(2):
        writer.handle(handoff.queue.get_nowait())
    logger.warning("fourth")
    for _ in range(2):
        writer.handle(handoff.queue.get_nowait())
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert (lines[0]["message"], lines[0]["request_id"]) == ("failed here", "req-x")
    assert "ValueError: boom" in lines[0]["exception"]
    dropped = "1 log lines were dropped: their writer was behind"
    assert [x["message"] for x in lines[1:]] == ["second", dropped, "fourth"]


def test_fresh_ids_are_uuid4s_and_names_match_in_any_case() -> None:
    for _ in range(200):
        made = request_ids.new()
        parsed = uuid.UUID(made.removeprefix("req-"))
        assert made == f"req-{parsed}" and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert request_ids.from_headers([(b"X-OpenStack-Request-ID", b"as-sent")]) == "as-sent"  # the metadata server's


def test_the_metadata_relay_s_id_is_taken_from_the_first_line_and_left_out_of_the_rest() -> None:
    rest = [(b"host", b"metadata"), (b"x-instance-id", b"i")]
    assert request_ids.split_first([(b"X-OpenStack-Request-ID", b"req-r"), *rest]) == ("req-r", rest)
    elsewhere = [*rest, (b"x-openstack-request-id", b"later")]
    assert request_ids.split_first(elsewhere) == ("later", elsewhere)  # any client: found, the lines left whole
    bad_first = [(b"x-openstack-request-id", b"bad id"), *rest]
    rid, lines = request_ids.split_first(bad_first)
    assert rid.startswith("req-") and lines == bad_first


def test_answers_get_the_id_as_their_first_header_rendered_or_not() -> None:
    rendered = http1.Response(200, [("Content-Type", "x")], b"body", wire=http1.render_response(200, [("Content-Type",
                              "x")], b"body", True))  # fmt: skip
    stamped = http1.with_first_header(rendered, request_ids.HEADER, "req-9")
    assert stamped.wire == http1.render_response(200, stamped.headers, b"body", True)
    assert stamped.headers[0] == (request_ids.HEADER, "req-9") and rendered.headers == [("Content-Type", "x")]
    assert http1.with_first_header(http1.plain(429, "no"), request_ids.HEADER, "r").wire is None


def test_cli_and_cni_errors_name_a_well_formed_id_only() -> None:
    error = ApiError.from_payload(409, {"NeutronError": {"message": "In use.", "type": "InUse"}}, "", "req-7")
    assert str(error) == "In use. (409 InUse) (Request-ID: req-7)" and error.request_id == "req-7"
    # Whatever answered chose the header: a hostile one is not printed.
    assert str(ApiError.from_payload(500, None, "Boom", "x\x1b[2Jbad")) == "Boom (500)"
    shaped = CniError(101, "could not plug", request_id="req-8").shape("1.1.0")
    assert shaped["details"] == "Request-ID: req-8"
    assert "details" not in CniError(100, "refused (Request-ID: req-8)", request_id="req-8").shape("1.1.0")
    assert (
        CniError(101, "a\nb", request_id="req-8").log_line("ADD")
        == "cloudnet-cni: ADD failed: a\\nb (Request-ID: req-8)"
    )
