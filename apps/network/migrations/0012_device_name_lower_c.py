"""The start of a device's name ("phone", "tv liv") in the office-hours search: a btree on the
lower-case name in the C collation, so that a prefix LIKE and ORDER BY both use it and the walk
stops at the rows wanted (apps/network/search.py `_lower_name_sql`)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("network", "0011_alter_subnet_building"),
    ]

    operations = [
        migrations.RunSQL(
            sql='CREATE INDEX IF NOT EXISTS network_device_name_lower_c ON network_device ((lower(name)) COLLATE "C")',
            reverse_sql="DROP INDEX IF EXISTS network_device_name_lower_c",
        ),
    ]
