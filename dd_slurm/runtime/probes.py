"""Readiness probes: strict HTTP (200 only) with short timeouts, carrying the attempt's key as
`Authorization: Bearer` (the key is never recorded). The caller owns deadlines. http.client is
imported at the first probe (while the servers load), not at supervisor start."""

from __future__ import annotations

import json
from typing import Any, Optional

MAX_BODY = 1 << 20


def _get(host: str, port: int, path: str, key: Optional[str], timeout_s: float) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    headers = {"Connection": "close", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(MAX_BODY)
    finally:
        conn.close()


def probe_health(host: str, port: int, path: str, key: Optional[str] = None, timeout_s: float = 0.5) -> dict[str, Any]:
    """{"ok": bool, "status": int | None, "error": str | None}; never raises."""
    import http.client

    try:
        status, _body = _get(host, port, path, key, timeout_s)
        return {"ok": status == 200, "status": status, "error": None}
    except (OSError, http.client.HTTPException) as err:
        return {"ok": False, "status": None, "error": f"{type(err).__name__}: {err}"[:200]}


def served_models(host: str, port: int, key: Optional[str] = None,
                  timeout_s: float = 5.0) -> tuple[list[str], Optional[str]]:
    """The model ids `/v1/models` lists, or a problem (status, connection, shape); never raises."""
    import http.client

    try:
        status, body = _get(host, port, "/v1/models", key, timeout_s)
    except (OSError, http.client.HTTPException) as err:
        return [], f"/v1/models: {type(err).__name__}: {err}"[:200]
    if status != 200:
        return [], f"/v1/models answered {status}"
    try:
        data = json.loads(body)["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m], None
    except (ValueError, KeyError, TypeError):
        return [], "/v1/models did not answer an OpenAI model list"
