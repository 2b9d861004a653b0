"""Cheaper readings (docs/traffic.md): no index of their own for the two foreign keys that lead a
unique key already, and room in every page for the next version of a row, so that a reading's
updates of counters and buckets can be HOT updates (no index touched: the updated columns are in
no index)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("firewall", "0016_site_fast_path"),
        ("members", "0006_search_tier_indexes"),
        ("traffic", "0001_traffic_buckets"),
    ]

    operations = [
        migrations.AlterField(
            model_name="trafficbucket",
            name="member",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="traffic_buckets",
                to="members.member",
            ),
        ),
        migrations.AlterField(
            model_name="trafficcounter",
            name="host",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="traffic_counters",
                to="firewall.firewallhost",
            ),
        ),
        migrations.RunSQL(
            "ALTER TABLE traffic_trafficcounter SET (fillfactor = 50);"
            "ALTER TABLE traffic_trafficbucket SET (fillfactor = 70);",
            "ALTER TABLE traffic_trafficcounter RESET (fillfactor);"
            "ALTER TABLE traffic_trafficbucket RESET (fillfactor);",
        ),
    ]
