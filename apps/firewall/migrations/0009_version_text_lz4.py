"""Version texts (7 MB of nft text per host and version at 20,000 members) are written on every
run: lz4 instead of PostgreSQL's default pglz halves the time to store one."""

from django.db import migrations

FORWARD = (
    "ALTER TABLE firewall_rulesetversion ALTER COLUMN nft_text SET COMPRESSION lz4, "
    "ALTER COLUMN tc_text SET COMPRESSION lz4"
)
BACKWARD = (
    "ALTER TABLE firewall_rulesetversion ALTER COLUMN nft_text SET COMPRESSION pglz, "
    "ALTER COLUMN tc_text SET COMPRESSION pglz"
)


class Migration(migrations.Migration):
    dependencies = [("firewall", "0008_sites_bundle_pinning")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
