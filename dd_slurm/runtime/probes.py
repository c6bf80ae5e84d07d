"""Readiness probes: strict HTTP with short timeouts; the caller owns deadlines. The attempt's key
(`Authorization: Bearer`, never recorded) goes only to a ProvenPort, a port whose listener the
identity check proved ours in this attempt: a foreign process that took a replica's port never
receives it. Before that proof a probe carries no key. http.client is imported at the first probe
(while the servers load), not at supervisor start, by one thread while the others wait: probes run
side by side in threads, and a thread that imported it alongside another once found the package
without its `client` attribute (AttributeError: module 'http' has no attribute 'client', an
internal_error on the 26.05 lab's Python 3.14)."""

from __future__ import annotations

import json
import threading
from types import ModuleType
from typing import Any, NamedTuple, Optional

MAX_BODY = 1 << 20
KEY_WANTED = 401  # what a server that wants the key answers a request without it


class ProvenPort(NamedTuple):
    """A replica's host and port whose listener the identity check has proven ours in this attempt."""

    host: str
    port: int


_IMPORTING = threading.Lock()


def http_client() -> ModuleType:
    """http.client, imported once whichever probe thread asks first; the others wait for it whole."""
    with _IMPORTING:
        import http.client as client
    return client


def bearer(key: Optional[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _get(host: str, port: int, path: str, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    client = http_client()
    conn = client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Connection": "close", **headers})
        response = conn.getresponse()
        return response.status, response.read(MAX_BODY)
    finally:
        conn.close()


def _health(host: str, port: int, path: str, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
    client = http_client()
    try:
        status, _body = _get(host, port, path, headers, timeout_s)
        return {"ok": status == 200, "status": status, "error": None, "path": path}
    except (OSError, client.HTTPException) as err:
        return {"ok": False, "status": None, "error": error_words(err, timeout_s), "path": path}


def error_words(err: BaseException, timeout_s: float) -> str:
    """What went wrong in the words a person reads in a watch line: `connection refused`, `no
    answer within 0.5s`, `no route to host`; not the exception's class and errno."""
    client = http_client()
    if isinstance(err, TimeoutError):
        return f"no answer within {timeout_s:g}s"
    if isinstance(err, client.HTTPException):
        return f"not an HTTP answer ({type(err).__name__})"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror[:1].lower() + err.strerror[1:200]
    return f"{type(err).__name__}: {err}"[:200]


def probe_health(host: str, port: int, path: str, withheld_key: Optional[str] = None,
                 timeout_s: float = 0.5) -> dict[str, Any]:
    """The probe before the port is proven ours: it never carries a key. {"ok": bool, "status":
    int | None, "error": str | None}; ok on 200, and on 401 when the attempt has a key
    (`withheld_key`, never sent) the server may want: then probe_proven, with the key once the
    identity check has passed, decides. Never raises."""
    answer = _health(host, port, path, {}, timeout_s)
    if withheld_key and answer["status"] == KEY_WANTED:
        return {**answer, "ok": True}
    return answer


def probe_proven(target: ProvenPort, path: str, key: Optional[str], timeout_s: float = 0.5) -> dict[str, Any]:
    """The health probe carrying the key, to a port proven ours: ok on 200 only; never raises."""
    return _health(target.host, target.port, path, bearer(key), timeout_s)


def served_models(target: ProvenPort, key: Optional[str] = None,
                  timeout_s: float = 5.0) -> tuple[list[str], Optional[str]]:
    """The model ids `/v1/models` of a port proven ours lists, or a problem (status, connection,
    shape); never raises."""
    client = http_client()
    try:
        status, body = _get(target.host, target.port, "/v1/models", bearer(key), timeout_s)
    except (OSError, client.HTTPException) as err:
        return [], f"/v1/models: {type(err).__name__}: {err}"[:200]
    if status != 200:
        return [], f"/v1/models answered {status}"
    try:
        data = json.loads(body)["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m], None
    except (ValueError, KeyError, TypeError):
        return [], "/v1/models did not answer an OpenAI model list"
