"""Incidents start in 2000 or later: a row typed as year 1 (stored as a BC date that no page
could read back) is repaired to when it was declared, then the constraint keeps it so."""

import datetime

from django.db import migrations, models

REPAIR = (
    "UPDATE tickets_incident SET started_at = created_at "
    "WHERE started_at < '2000-01-01T00:00:00+00:00'"
)


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0004_ticket_sender_unverified"),
    ]

    operations = [
        migrations.RunSQL(REPAIR, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="incident",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("started_at__gte", datetime.datetime(2000, 1, 1, 0, 0, tzinfo=datetime.UTC))
                ),
                name="incident_started_sane",
            ),
        ),
    ]
