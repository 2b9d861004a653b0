"""DATABASE_URL, including libpq's multi-host form for a primary and its hot standbys.

`postgresql://portal:pw@db1:5432,db2:5432/portal` lists every server that may be the primary;
libpq tries them in order and, with `target_session_attrs=read-write` (the default here when
more than one host is named), keeps only the one that accepts writes. After a standby is
promoted, the next new connection finds it; Django's CONN_HEALTH_CHECKS drops a connection to a
dead primary at the start of the next request, so web and worker processes recover without a
restart. dj-database-url parses one host only, so the host list is taken apart here and given
to psycopg as host=db1,db2 port=5432,5432.

No Django here: settings.py calls it while it is being read.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import dj_database_url

__all__ = ["database_from_url"]

_HOST_PORT = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*))(?::(?P<port>\d+))?$")
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<netloc>[^/?#]*)(?P<rest>.*)$")
_SESSION_ATTRS = {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}


def database_from_url(url: str, *, conn_max_age: int) -> dict[str, Any]:
    """Django's DATABASES entry for `url`; raise ValueError naming what is wrong."""
    options = {"conn_max_age": conn_max_age, "conn_health_checks": True}
    parts = _URL.match(url)
    userinfo, at, hostlist = (parts["netloc"] if parts else "").rpartition("@")
    if not parts or "," not in hostlist:
        return dj_database_url.parse(url, **options)
    hosts: list[str] = []
    ports: list[str] = []
    for item in hostlist.split(","):
        match = _HOST_PORT.match(item.strip())
        if not match or not (match["ip6"] or match["host"]):
            raise ValueError(f"{item!r} in the host list is not host[:port]")
        port = match["port"] or "5432"
        if not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} in the host list has no valid port")
        hosts.append(match["ip6"] or unquote(match["host"]))
        ports.append(port)
    attrs = parse_qs(urlsplit(parts["rest"]).query).get("target_session_attrs", ["read-write"])[-1]
    if attrs not in _SESSION_ATTRS:
        raise ValueError(f"target_session_attrs={attrs!r} is not one of {sorted(_SESSION_ATTRS)}")
    single = f"{parts['scheme']}://{userinfo}{at}multi-host{parts['rest']}"
    db = dj_database_url.parse(single, **options)
    db["HOST"] = ",".join(hosts)
    db["PORT"] = ",".join(ports)
    db.setdefault("OPTIONS", {})["target_session_attrs"] = attrs
    return db
