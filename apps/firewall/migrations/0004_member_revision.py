"""Per-member revisions kept by triggers: the snapshot reader's change detection."""

from django.db import migrations, models

CHILD_TABLES = ("network_device", "network_portforward", "network_ipv6opening")

FORWARD = [
    "CREATE SEQUENCE firewall_member_rev_seq",
    """
    CREATE TABLE firewall_member_rev (
        member_id bigint PRIMARY KEY,
        revision bigint NOT NULL
    )
    """,
    # Every bump takes a new sequence value, so a revision never comes back (not even after a
    # rolled-back transaction): equal revision means unchanged rows. Rows are locked in
    # member order, so two transactions bumping the same members cannot deadlock here.
    """
    CREATE FUNCTION firewall_member_rev_bump(ids bigint[]) RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO firewall_member_rev (member_id, revision)
        SELECT m, nextval('firewall_member_rev_seq')
        FROM (SELECT DISTINCT m FROM unnest(ids) AS m WHERE m IS NOT NULL ORDER BY m) AS s
        ON CONFLICT (member_id) DO UPDATE SET revision = EXCLUDED.revision
    $$
    """,
    """
    CREATE FUNCTION firewall_member_rev_trigger() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        ids bigint[];
    BEGIN
        IF TG_TABLE_NAME = 'network_ipv6opening' THEN
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                ids := ARRAY(SELECT d.member_id FROM network_device d
                             JOIN new_rows n ON n.device_id = d.id);
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                ids := ids || ARRAY(SELECT d.member_id FROM network_device d
                                    JOIN old_rows o ON o.device_id = d.id);
            END IF;
        ELSE
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                ids := ARRAY(SELECT member_id FROM new_rows);
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                ids := ids || ARRAY(SELECT member_id FROM old_rows);
            END IF;
        END IF;
        PERFORM firewall_member_rev_bump(ids);
        RETURN NULL;
    END
    $$
    """,
    # TRUNCATE has no rows to name: it starts a new epoch, and a reader that sees a new epoch
    # forgets everything it built (member ids may even be reused after a sequence reset).
    "CREATE TABLE firewall_member_rev_epoch (epoch bigint NOT NULL)",
    "INSERT INTO firewall_member_rev_epoch VALUES (nextval('firewall_member_rev_seq'))",
    """
    CREATE FUNCTION firewall_member_rev_forget() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE firewall_member_rev_epoch SET epoch = nextval('firewall_member_rev_seq');
        RETURN NULL;
    END
    $$
    """,
    """CREATE TRIGGER firewall_rev_trunc AFTER TRUNCATE ON members_member
        FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_forget()""",
]
for table in CHILD_TABLES:
    FORWARD += [
        f"""CREATE TRIGGER firewall_rev_ins AFTER INSERT ON {table}
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_trigger()""",
        f"""CREATE TRIGGER firewall_rev_upd AFTER UPDATE ON {table}
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_trigger()""",
        f"""CREATE TRIGGER firewall_rev_del AFTER DELETE ON {table}
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_trigger()""",
        f"""CREATE TRIGGER firewall_rev_trunc AFTER TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_forget()""",
    ]

BACKWARD = [
    *(
        f"DROP TRIGGER IF EXISTS firewall_rev_{op} ON {table}"
        for table in CHILD_TABLES
        for op in ("ins", "upd", "del", "trunc")
    ),
    "DROP TRIGGER IF EXISTS firewall_rev_trunc ON members_member",
    "DROP FUNCTION IF EXISTS firewall_member_rev_forget()",
    "DROP TABLE IF EXISTS firewall_member_rev_epoch",
    "DROP FUNCTION IF EXISTS firewall_member_rev_trigger()",
    "DROP FUNCTION IF EXISTS firewall_member_rev_bump(bigint[])",
    "DROP TABLE IF EXISTS firewall_member_rev",
    "DROP SEQUENCE IF EXISTS firewall_member_rev_seq",
]


class Migration(migrations.Migration):
    dependencies = [
        ("firewall", "0003_snapshot_json"),
        ("members", "0003_search_prefix_indexes"),
        ("network", "0004_policy_defaults"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.CreateModel(
            name="MemberRevision",
            fields=[
                (
                    "member",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=models.DO_NOTHING,
                        primary_key=True,
                        related_name="firewall_revision",
                        serialize=False,
                        to="members.member",
                    ),
                ),
                ("revision", models.BigIntegerField()),
            ],
            options={"db_table": "firewall_member_rev", "managed": False},
        ),
    ]
