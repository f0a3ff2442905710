"""SmartOS mdata socket requests counted by command and result, from a real socket: what the agent then sends in its
heartbeat (tests/integration/test_metrics_agent.py follows samples from there to the scrape)."""

from __future__ import annotations

from typing import Any

from cloudnet import metrics
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_protocol import crc32_hex
from tests.integration.test_mdata import agent_client, host, instance, service, start, state_dir  # noqa: F401
from tests.support.mdata_raw import Raw

NAME = "cloudnet_mdata_requests_total"


def counted(command: str, result: str) -> float:
    return metrics.AGENT.get_sample_value(NAME, {"command": command, "result": result}) or 0.0


def test_mdata_requests_by_command_and_result(service: MdataService, instance: dict[str, Any]) -> None:  # noqa: F811
    kinds = [("negotiate", "answered"), ("GET", "answered"), ("KEYS", "answered"), ("invalid", "dropped"),
             ("other", "answered")]  # fmt: skip
    before = {k: counted(*k) for k in kinds}
    raw = Raw(str(service.socket_path(instance["id"])))
    try:
        raw.send(b"NEGOTIATE V2\n")
        assert raw.line() == b"V2_OK"
        assert raw.request("GET", b"sdc:uuid") == ("SUCCESS", instance["id"].encode())
        assert raw.request("GET", b"role") == ("SUCCESS", b"web")
        assert raw.request("KEYS", b"")[0] == "SUCCESS"
        raw.send(b"V2 nonsense\n")  # dropped, unanswered
        spoof = b"0badf00d SUCCESS b3du"  # a response's shape: an unknown command, whatever its name
        raw.send(b"V2 %d %s %s\n" % (len(spoof), crc32_hex(spoof), spoof))
        assert raw.line() is not None
    finally:
        raw.close()
    grown = {k: counted(*k) - before[k] for k in kinds}
    assert grown == {("negotiate", "answered"): 1, ("GET", "answered"): 2, ("KEYS", "answered"): 1,
                     ("invalid", "dropped"): 1, ("other", "answered"): 1}  # fmt: skip
    assert all(dict(s[2]).get("command") != "SUCCESS" for s in metrics.samples() if s[0] == "cloudnet_mdata_requests")
