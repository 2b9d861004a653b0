"""Indexes for reading the name search's rank tiers in index order (issue 16).

apps/members/selectors.py `_text_user_ids` takes the first 25 members whose last name (or
first name) equals or starts with a word by walking one of these btrees: upper-cased name in
the C collation first (equality and a prefix LIKE become a range whatever the database's
collation), then the order the result is shown in (last name, first name, login id). Without
them a last name shared by 4,000 members was ranked and sorted in full for each search.
"""

from django.db import migrations

BY_LAST = 'last_name COLLATE "C", first_name COLLATE "C", id'
INDEXES = {
    "members_user_last_name_order": f'auth_user ((UPPER(last_name::text)) COLLATE "C", {BY_LAST})',
    "members_user_first_name_order": (
        f'auth_user ((UPPER(first_name::text)) COLLATE "C", '
        f'(UPPER(last_name::text)) COLLATE "C", {BY_LAST})'
    ),
}


class Migration(migrations.Migration):
    dependencies = [("members", "0005_search_match_indexes")]

    operations = [
        migrations.RunSQL(
            sql=[f"CREATE INDEX IF NOT EXISTS {name} ON {spec}" for name, spec in INDEXES.items()],
            reverse_sql=[f"DROP INDEX IF EXISTS {name}" for name in INDEXES],
        ),
    ]
