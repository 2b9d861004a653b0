"""Indexes for the office-hours search's new kinds of query (issue 16), each on exactly the
expression apps/members/selectors.py queries:

- the compact room label ("a101" finds A-101): lower case, letters and digits only;
- the start of an IPv4 address ("10.0.3"): the address as text in the C collation, so that the
  prefix LIKE and the ORDER BY of the first 25 both walk one btree, for devices and public
  addresses;
- part of a MAC ("ee:ff", "ddeeff"): trigrams of the MAC's hex digits.

CONCURRENTLY is not used: Django runs a migration in a transaction; on 100,000 members with
300,000 devices these take a few seconds.
"""

from django.db import migrations

INDEXES = {
    "members_room_label_compact": (
        "members_room ((regexp_replace(lower(label), '[^0-9a-z]', '', 'g')))"
    ),
    "network_device_ipv4_host_c": 'network_device ((host(ipv4)) COLLATE "C")',
    "network_publicaddress_host_c": 'network_publicaddress ((host(address)) COLLATE "C")',
    "network_device_mac_hex_trgm": (
        "network_device USING gin ((replace(mac::text, ':', '')) gin_trgm_ops)"
    ),
}


class Migration(migrations.Migration):
    dependencies = [
        ("members", "0004_member_erased_at"),
        ("network", "0008_syn_proxy"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[f"CREATE INDEX IF NOT EXISTS {name} ON {spec}" for name, spec in INDEXES.items()],
            reverse_sql=[f"DROP INDEX IF EXISTS {name}" for name in INDEXES],
        ),
    ]
