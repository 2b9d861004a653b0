"""What the network app announces to the floors above it, which it does not import.

Each signal is sent inside the writing service's transaction, after the row is written, so a
receiver writes in the same transaction (a refused write records nothing). The abuse app
listens (apps/abuse/apps.py) and keeps its address history: who held an address when.

- `public_ipv4_assigned(address, member, at)`: a member received a public IPv4.
- `public_ipv4_quarantined(address, member, at, until)`: a member gave it back; it rests in
  quarantine until `until`.
- `device_addresses_changed(device, before, after, cause, at)`: a device got, changed or gave
  back addresses (`before`/`after`: its ipv4, ipv6 and mac; `{}` for a new or removed device).
"""

from __future__ import annotations

from django.dispatch import Signal

public_ipv4_assigned = Signal()
public_ipv4_quarantined = Signal()
device_addresses_changed = Signal()
