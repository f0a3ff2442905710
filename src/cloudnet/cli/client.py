"""The CLI's HTTP client for cloudnet's Neutron v2.0 API (httpx), turning every failure into a `CliError`."""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

import httpx

from cloudnet.cli.errors import ApiError, CliError
from cloudnet.cli.resources import (  # noqa: F401  (the CLI's modules import them from here)
    DEFAULT_TIMEOUT,
    DEFAULT_TOKEN,
    DEFAULT_URL,
    HOST,
    INSTANCE,
    NETWORK,
    PORT,
    ROUTER,
    SECURITY_GROUP,
    SECURITY_GROUP_RULE,
    SUBNET,
    Kind,
    Params,
    Resource,
    Resources,
    api_root,
    reason,
)
from cloudnet.wire import request_ids


class Client(Resources):
    """Requests against `<url>/v2.0`, authenticated with `X-Auth-Token`.

    `http` lets a caller (tests, an in-process server) supply its own `httpx.Client`; it is then
    not closed here. Requests always use absolute URLs, so that client's base_url does not matter.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str = DEFAULT_TOKEN,
        *,
        http: httpx.Client | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        cacert: Path | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.cacert = cacert
        self.token = token
        self.timeout = timeout
        self._http = http
        self._owns_http = http is None

    def close(self) -> None:
        if self._owns_http and self._http is not None:
            self._http.close()
            self._http = None

    def request(self, method: str, path: str, *, params: Params | None = None, body: Any = None) -> Any:
        response = self._send(method, path, params, body, "application/json")
        if response.status_code == 204 or not response.content:
            return None
        payload = _json_or_none(response)
        if payload is None:
            raise CliError(f"cloudnet at {self.url} answered {method} {path} with a body that is not JSON")
        return payload

    def download(self, path: str, accept: str) -> bytes:
        """A GET whose answer is not JSON (errors still are): e.g. a config drive image."""
        return self._send("GET", path, None, None, accept).content

    def _send(self, method: str, path: str, params: Params | None, body: Any, accept: str) -> httpx.Response:
        url = f"{api_root(self.url)}/{path.lstrip('/')}"
        try:
            response = self._session().request(
                method,
                url,
                params=list(params) if params else None,
                json=body,
                headers={"X-Auth-Token": self.token, "Accept": accept},
                timeout=self.timeout,
            )
        except httpx.ConnectError as exc:
            raise CliError(f"cannot reach cloudnet at {self.url}: {reason(exc)}") from None
        except httpx.TimeoutException:
            raise CliError(f"cloudnet at {self.url} did not answer within {self.timeout:g}s") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise CliError(f"request to cloudnet at {self.url} failed: {reason(exc)}") from None
        if not response.is_success:
            # 3xx too: redirects are not followed, so the request did not happen.
            raise ApiError.from_payload(response.status_code, _json_or_none(response), response.reason_phrase,
                                        response.headers.get(request_ids.HEADER))  # fmt: skip
        return response

    def _session(self) -> httpx.Client:
        if self._http is None:
            if not re.match(r"^https?://", self.url):
                raise CliError(f"cloudnet URL must start with http:// or https://, got '{self.url}'")
            self._http = httpx.Client(verify=_tls_context(self.url, self.cacert))
        return self._http


def _tls_context(url: str, cacert: Path | None = None) -> ssl.SSLContext | bool:
    """Full verification for https (against `cacert` when given: the cloud's own CA); for plain http, skip loading
    the CA bundle (~25 ms a command).

    Redirects are not followed, so an http URL never reaches TLS; should one ever, the bare context
    (verification on, no trusted CAs) fails the handshake instead of trusting it.
    """
    if url.startswith("https://"):
        try:
            return True if cacert is None else ssl.create_default_context(cafile=cacert)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot read the CA certificate {cacert}: {exc}") from None
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
