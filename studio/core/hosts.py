"""Which host names the studio's web server answers to (RELIABILITY R43): loopback names, the bind address,
names given with ``--allowed-host``, and this machine's own names when bound to every interface.

Not browser code: ``onnx-studio serve`` (studio.cli) checks its options with it and hands the list to the
server process in ``ONNX_STUDIO_ALLOWED_HOSTS``; the server's ASGI guard (:mod:`studio.ui.webguard`) reads
it back. Both front ends import it, so it stays in core; the guard itself is front-end code and lives in
studio.ui.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable

__all__ = ["ALLOWED_HOSTS_ENV", "LOOPBACK_NAMES", "WILDCARD_BINDS", "allowed_hosts", "allowed_hosts_from_env",
           "host_name", "is_loopback"]

ALLOWED_HOSTS_ENV = "ONNX_STUDIO_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host part of a Host header value, lower case, without port or trailing dot."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        h = h[1:end] if end > 0 else h[1:]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _own_names() -> set[str]:
    """Names and addresses of this machine, allowed when binding every interface."""
    names: set[str] = set()
    try:
        hostname = socket.gethostname()
        names.update({hostname, socket.getfqdn()})
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return {n.lower() for n in names if n}


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names the server answers to: loopback, the bind address, ``extra`` (and the
    machine's own names when bound to every interface)."""
    names = set(LOOPBACK_NAMES)
    b = bind.strip().strip("[]").lower()
    if b in WILDCARD_BINDS:
        names |= _own_names()
    else:
        names.add(b)
    names |= {host_name(e) for e in extra if e.strip()}
    return frozenset(names)


def allowed_hosts_from_env(default_bind: str = "127.0.0.1") -> frozenset[str]:
    raw = os.environ.get(ALLOWED_HOSTS_ENV)
    if raw is None:
        return allowed_hosts(default_bind)
    return frozenset(h for h in raw.split(",") if h) | frozenset(LOOPBACK_NAMES)
