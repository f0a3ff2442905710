"""Small helpers the API tests share: create a resource, check a Neutron error."""

from __future__ import annotations

from typing import Any

import httpx

Json = dict[str, Any]


def create(api: httpx.Client, collection: str, member: str, **body: Any) -> Json:
    """POST one resource and return it (asserting 201)."""
    r = api.post(f"/{collection}", json={member: body})
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def error(r: httpx.Response, status: int, type_: str | None = None) -> str:
    """The response is a NeutronError with this status (and type); returns its message."""
    assert r.status_code == status, r.text
    err = r.json()["NeutronError"]
    if type_ is not None:
        assert err["type"] == type_, err
    assert err["message"]
    return str(err["message"])
