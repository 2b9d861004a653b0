"""Indexes for the office-hours search's last kinds of query (issue 25), each on exactly the
expression apps/network/search.py queries:

- the end of a device's IPv6 address ("::1a2b", "fedd:eeff"): the address text reversed, in the
  C collation, so that the suffix is a prefix LIKE on one btree;
- a device's name ("laptop"): trigrams of the lower-case name.

CONCURRENTLY is not used: Django runs a migration in a transaction.
"""

from django.db import migrations

INDEXES = {
    "network_device_ipv6_rev_c": 'network_device ((reverse(host(ipv6))) COLLATE "C")',
    "network_device_name_trgm": "network_device USING gin ((lower(name)) gin_trgm_ops)",
}


class Migration(migrations.Migration):
    dependencies = [
        ("network", "0009_testaccess_moved"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[f"CREATE INDEX IF NOT EXISTS {name} ON {spec}" for name, spec in INDEXES.items()],
            reverse_sql=[f"DROP INDEX IF EXISTS {name}" for name in INDEXES],
        ),
    ]
