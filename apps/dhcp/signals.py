"""What the DHCP app announces to the floors above it, which it does not import.

`registration_leases_seen(leases, continues_within)` is sent inside `leases_store`'s transaction
with the leases of unknown devices (addresses in a registration range: (address, mac, starts,
ends) each). The abuse app listens (apps/abuse/apps.py): nothing else records who held those
addresses.
"""

from __future__ import annotations

from django.dispatch import Signal

registration_leases_seen = Signal()
