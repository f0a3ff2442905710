"""The plugin's HTTP client: the standard library's http.client over one keep-alive connection. A runtime starts
the plugin once per ADD/DEL/CHECK, so its start-up is on every container's path; httpx (with the click and rich
it imports) was most of that start-up, for the handful of requests an ADD makes."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from typing import Any
from urllib.parse import urlencode, urlsplit

from cloudnet.cli.errors import ApiError, CliError
from cloudnet.cli.resources import Params, Resources, api_root, reason
from cloudnet.wire import request_ids

MAX_BODY = 16 << 20  # an answer larger than this is not one of cloudnet's
IDEMPOTENT = ("GET", "DELETE")  # retried once on a fresh connection when a kept-alive one was closed under them


class PluginClient(Resources):
    def __init__(self, url: str, token: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        root = urlsplit(api_root(self.url))
        if root.scheme not in ("http", "https") or not root.hostname:
            raise CliError(f"cloudnet URL must start with http:// or https://, got '{self.url}'")
        self._root = root
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self._root.hostname or "", self._root.port
            if self._root.scheme == "https":
                self._conn = http.client.HTTPSConnection(host, port, timeout=self.timeout,
                                                         context=ssl.create_default_context())  # fmt: skip
            else:
                self._conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        return self._conn

    def request(self, method: str, path: str, *, params: Params | None = None, body: Any = None) -> Any:
        target = f"{self._root.path}/{path.lstrip('/')}" + (f"?{urlencode(list(params))}" if params else "")
        headers = {"X-Auth-Token": self.token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            reused = self._conn is not None
            self.last_request_id = ""
            try:
                conn = self._connection()
                conn.request(method, target, body=data, headers=headers)
                response = conn.getresponse()
                status, text = response.status, response.read(MAX_BODY + 1)
                self.last_request_id = request_ids.well_formed(response.getheader(request_ids.HEADER)) or ""
                if response.will_close or len(text) > MAX_BODY:  # (the rest of a body too large is left unread)
                    self.close()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if attempt == 1 and reused and method in IDEMPOTENT:
                    continue
                raise CliError(f"request to cloudnet at {self.url} failed: {reason(exc)}") from None
            except TimeoutError:
                self.close()
                raise CliError(f"cloudnet at {self.url} did not answer within {self.timeout:g}s") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                what = "cannot reach cloudnet at" if isinstance(exc, ConnectionError | socket.gaierror) else \
                    "request to cloudnet failed at"  # fmt: skip
                raise CliError(f"{what} {self.url}: {reason(exc)}") from None
        if len(text) > MAX_BODY:
            raise CliError(f"cloudnet at {self.url} answered {method} {path} with over {MAX_BODY} bytes")
        payload = _json_or_none(text)
        if not 200 <= status < 300:  # 3xx too: redirects are not followed, so the request did not happen
            raise ApiError.from_payload(status, payload, http.client.responses.get(status, ""), self.last_request_id)
        if status == 204 or not text:
            return None
        if payload is None:
            raise CliError(f"cloudnet at {self.url} answered {method} {path} with a body that is not JSON")
        return payload


def _json_or_none(text: bytes) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
