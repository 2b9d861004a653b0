"""Room in every bucket page for the next version of each of its rows (fillfactor 50, was 70).

A reading updates every bucket of the current hour that got traffic, all in one transaction; a
HOT update (no index touched) needs the new version on the same page, and the versions a
transaction replaces cannot be pruned before it commits. With 70 % of a page filled, only about
a third of a page's rows found room: at 100,000 members the other two thirds of 374,107 updates
went to other pages and into all five indexes (1.64 million WAL records instead of 374,107;
docs/traffic.md, "Storing a reading"). Applies to pages written from now on."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("traffic", "0002_hot_updates")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE traffic_trafficbucket SET (fillfactor = 50);",
            "ALTER TABLE traffic_trafficbucket SET (fillfactor = 70);",
        ),
    ]
