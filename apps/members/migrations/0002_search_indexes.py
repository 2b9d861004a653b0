"""Trigram indexes for the office-hours search over logins (auth_user belongs to Django).

The expressions match what `icontains` generates on PostgreSQL (UPPER(col::text) LIKE ...), so
substring searches on names and e-mail addresses use the index instead of scanning every user.
"""

from django.db import migrations

COLUMNS = ("first_name", "last_name", "email", "username")


class Migration(migrations.Migration):
    dependencies = [("members", "0001_initial")]

    operations = [
        migrations.RunSQL(
            sql=[
                f"CREATE INDEX IF NOT EXISTS members_user_{col}_trgm ON auth_user "
                f"USING gin ((UPPER({col}::text)) gin_trgm_ops)"
                for col in COLUMNS
            ],
            reverse_sql=[f"DROP INDEX IF EXISTS members_user_{col}_trgm" for col in COLUMNS],
        ),
    ]
