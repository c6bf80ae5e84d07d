"""Readiness probes: strict HTTP (200 only) with short timeouts. The caller owns deadlines."""

from __future__ import annotations

import http.client
from typing import Any


def probe_health(host: str, port: int, path: str, timeout_s: float = 0.5) -> dict[str, Any]:
    """{"ok": bool, "status": int | None, "error": str | None}; never raises."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        response.read(65536)
        return {"ok": response.status == 200, "status": response.status, "error": None}
    except (OSError, http.client.HTTPException) as err:
        return {"ok": False, "status": None, "error": f"{type(err).__name__}: {err}"[:200]}
    finally:
        conn.close()
