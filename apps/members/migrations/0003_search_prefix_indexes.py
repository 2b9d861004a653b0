"""Prefix indexes for one- and two-letter searches at the desk ("ko" for Kowalski).

Trigram indexes cannot narrow a match shorter than three letters, so short terms are matched as
prefixes of names and logins; these btree indexes (text_pattern_ops, because LIKE 'KO%' can only
use a btree under the C collation or a pattern operator class) answer them without a scan.
"""

from django.db import migrations

COLUMNS = ("first_name", "last_name", "username", "email")


class Migration(migrations.Migration):
    dependencies = [("members", "0002_search_indexes")]

    operations = [
        migrations.RunSQL(
            sql=[
                f"CREATE INDEX IF NOT EXISTS members_user_{col}_prefix ON auth_user "
                f"((UPPER({col}::text)) text_pattern_ops)"
                for col in COLUMNS
            ],
            reverse_sql=[f"DROP INDEX IF EXISTS members_user_{col}_prefix" for col in COLUMNS],
        ),
    ]
