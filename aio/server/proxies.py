"""Who the client is: X-Forwarded-For and X-Forwarded-Proto are believed only from the proxies the
`trusted_proxies` setting names (addresses or networks), never from anyone else on the host.

uvicorn's own default trusts 127.0.0.1, so any local process could forge its address (past the failed-attempt
limits) and its scheme (a `Secure` cookie over plain HTTP). `aio serve` passes uvicorn these options instead:
proxy headers off with no trusted proxy, else believed from the named ones only. Behind them, uvicorn gives the
app the original client's address and scheme, and the access log shows the same.
"""
from __future__ import annotations

from typing import Any


def proxy_header_options(trusted_proxies: list[str]) -> dict[str, Any]:
    """uvicorn.run's proxy_headers and forwarded_allow_ips for the `trusted_proxies` setting."""
    if not trusted_proxies:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": ",".join(trusted_proxies)}
