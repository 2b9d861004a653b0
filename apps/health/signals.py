"""What the health app announces to the floors above it, which it does not import.

`public_face_changed` is sent after the commit of a health sample that changes what the public
status page shows about a host (reachable, each family's VRRP state): a failover or a host
lost. The tickets app's status page listens (apps/tickets/apps.py) and rebuilds its cache, so
the page says so now, not when its cache expires.
"""

from __future__ import annotations

from django.dispatch import Signal

public_face_changed = Signal()
