"""Per-member revisions follow every row the snapshot reads for a member, and name the
transaction that wrote them: the snapshot reader reads only members changed since its last read.

Migration 0004's triggers follow a member's devices, port forwards and IPv6 openings. These
follow the rest of what `apps.firewall.snapshot` reads for a member: its own row (status, room),
its public IPv4 (which member holds which address), its test access (the shaping profile), its
room (IPv6 prefix, building) and its test access's shaping profile (the rates). A member row
edit that changes none of these (a phone number) bumps nothing.

`xid` is the transaction that last bumped the row. A reader that kept the snapshot of its last
read (`pg_current_snapshot()`) reads the members whose rows a transaction wrote that this
snapshot did not see, committed in any order since (a revision number alone cannot say that:
a transaction that took a lower number may commit after a reader saw a higher one).
"""

from django.db import migrations

# The tables of a member's own rows (0004 has the child tables: devices, forwards, openings).
ROW_TABLES = (
    "members_member",
    "network_publicaddress",
    "network_testaccess",
    "members_room",
    "network_shapingprofile",
)

FORWARD = [
    "ALTER TABLE firewall_member_rev ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id()",
    "CREATE INDEX firewall_member_rev_xid ON firewall_member_rev (xid)",
    """
    CREATE OR REPLACE FUNCTION firewall_member_rev_bump(ids bigint[]) RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO firewall_member_rev (member_id, revision, xid)
        SELECT m, nextval('firewall_member_rev_seq'), pg_current_xact_id()
        FROM (SELECT DISTINCT m FROM unnest(ids) AS m WHERE m IS NOT NULL ORDER BY m) AS s
        ON CONFLICT (member_id) DO UPDATE SET revision = EXCLUDED.revision, xid = EXCLUDED.xid
    $$
    """,
    # An UPDATE bumps the members of the (member, columns) tuples that appeared or went away:
    # rows whose columns the snapshot reads did not change bump nothing.
    """
    CREATE FUNCTION firewall_member_rev_row_trigger() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        ids bigint[];
    BEGIN
        IF TG_TABLE_NAME = 'members_member' THEN
            IF TG_OP = 'INSERT' THEN
                ids := ARRAY(SELECT id FROM new_rows);
            ELSIF TG_OP = 'DELETE' THEN
                ids := ARRAY(SELECT id FROM old_rows);
            ELSE
                ids := ARRAY(
                    SELECT id FROM (
                        (SELECT id, status, room_id FROM new_rows
                         EXCEPT SELECT id, status, room_id FROM old_rows)
                        UNION ALL
                        (SELECT id, status, room_id FROM old_rows
                         EXCEPT SELECT id, status, room_id FROM new_rows)
                    ) AS c);
            END IF;
        ELSIF TG_TABLE_NAME = 'network_publicaddress' THEN
            IF TG_OP = 'INSERT' THEN
                ids := ARRAY(SELECT member_id FROM new_rows);
            ELSIF TG_OP = 'DELETE' THEN
                ids := ARRAY(SELECT member_id FROM old_rows);
            ELSE
                ids := ARRAY(
                    SELECT member_id FROM (
                        (SELECT member_id, address FROM new_rows
                         EXCEPT SELECT member_id, address FROM old_rows)
                        UNION ALL
                        (SELECT member_id, address FROM old_rows
                         EXCEPT SELECT member_id, address FROM new_rows)
                    ) AS c);
            END IF;
        ELSIF TG_TABLE_NAME = 'network_testaccess' THEN
            IF TG_OP = 'INSERT' THEN
                ids := ARRAY(SELECT member_id FROM new_rows);
            ELSIF TG_OP = 'DELETE' THEN
                ids := ARRAY(SELECT member_id FROM old_rows);
            ELSE
                ids := ARRAY(
                    SELECT member_id FROM (
                        (SELECT member_id, profile_id FROM new_rows
                         EXCEPT SELECT member_id, profile_id FROM old_rows)
                        UNION ALL
                        (SELECT member_id, profile_id FROM old_rows
                         EXCEPT SELECT member_id, profile_id FROM new_rows)
                    ) AS c);
            END IF;
        ELSIF TG_TABLE_NAME = 'members_room' THEN
            -- Members point at a room (PROTECT): only an UPDATE reaches members.
            ids := ARRAY(
                SELECT m.id FROM members_member m WHERE m.room_id IN (
                    SELECT id FROM (
                        (SELECT id, building_id, ipv6_prefix FROM new_rows
                         EXCEPT SELECT id, building_id, ipv6_prefix FROM old_rows)
                        UNION ALL
                        (SELECT id, building_id, ipv6_prefix FROM old_rows
                         EXCEPT SELECT id, building_id, ipv6_prefix FROM new_rows)
                    ) AS c));
        ELSIF TG_TABLE_NAME = 'network_shapingprofile' THEN
            -- Test accesses point at a profile (PROTECT): only an UPDATE reaches members.
            -- Which profile is the default is read by the reader itself.
            ids := ARRAY(
                SELECT t.member_id FROM network_testaccess t WHERE t.profile_id IN (
                    SELECT id FROM (
                        (SELECT id, down_kbit, up_kbit FROM new_rows
                         EXCEPT SELECT id, down_kbit, up_kbit FROM old_rows)
                        UNION ALL
                        (SELECT id, down_kbit, up_kbit FROM old_rows
                         EXCEPT SELECT id, down_kbit, up_kbit FROM new_rows)
                    ) AS c));
        END IF;
        PERFORM firewall_member_rev_bump(ids);
        RETURN NULL;
    END
    $$
    """,
]
for table in ROW_TABLES:
    ops = ("upd",) if table in ("members_room", "network_shapingprofile") else ("ins", "upd", "del")
    if "ins" in ops:
        FORWARD.append(
            f"""CREATE TRIGGER firewall_rev_ins AFTER INSERT ON {table}
                REFERENCING NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_row_trigger()"""
        )
    FORWARD.append(
        f"""CREATE TRIGGER firewall_rev_upd AFTER UPDATE ON {table}
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_row_trigger()"""
    )
    if "del" in ops:
        FORWARD.append(
            f"""CREATE TRIGGER firewall_rev_del AFTER DELETE ON {table}
                REFERENCING OLD TABLE AS old_rows
                FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_row_trigger()"""
        )
    if table != "members_member":  # (0004 made members_member's)
        FORWARD.append(
            f"""CREATE TRIGGER firewall_rev_trunc AFTER TRUNCATE ON {table}
                FOR EACH STATEMENT EXECUTE FUNCTION firewall_member_rev_forget()"""
        )

BACKWARD = [
    *(
        f"DROP TRIGGER IF EXISTS firewall_rev_{op} ON {table}"
        for table in ROW_TABLES
        for op in ("ins", "upd", "del", "trunc")
        if not (table == "members_member" and op == "trunc")
    ),
    "DROP FUNCTION IF EXISTS firewall_member_rev_row_trigger()",
    """
    CREATE OR REPLACE FUNCTION firewall_member_rev_bump(ids bigint[]) RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO firewall_member_rev (member_id, revision)
        SELECT m, nextval('firewall_member_rev_seq')
        FROM (SELECT DISTINCT m FROM unnest(ids) AS m WHERE m IS NOT NULL ORDER BY m) AS s
        ON CONFLICT (member_id) DO UPDATE SET revision = EXCLUDED.revision
    $$
    """,
    "DROP INDEX IF EXISTS firewall_member_rev_xid",
    "ALTER TABLE firewall_member_rev DROP COLUMN IF EXISTS xid",
]


class Migration(migrations.Migration):
    dependencies = [
        ("firewall", "0018_resolver"),
        ("members", "0006_search_tier_indexes"),
        ("network", "0012_device_name_lower_c"),
        ("testaccess", "0002_content_type"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
