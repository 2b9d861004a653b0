"""The office-hours search by name, e-mail or login: the first matches, best first, read rank
tier by rank tier in index order (issue 16).

A single word may match thousands of members (a common last name: ~4,000 of 100,000 in the
demo data). Ranking all of them and sorting to show 25 cost 30-220 ms; here each tier walks
a btree in the order it is shown and stops at the limit, and a tier runs only while the tiers
before it found fewer, so such a search reads about 25 index entries.

Raw SQL because the ORM cannot say "this tier only if the one before came up short" (an
uncorrelated count in WHERE, which PostgreSQL turns into a one-time filter that keeps the scan
from starting) nor match the C-collated index expressions. The statement is built from the
constant fragments below; every value typed at the desk is a bound parameter.
"""

from __future__ import annotations

from django.db import connection

from apps.members.models import Member

__all__ = ["name_search_rows"]

# The expressions of the btree indexes of members migration 0006 (keep them equal):
# upper-cased names in the C collation, so that equality, a prefix LIKE and the ORDER BY walk
# one index each, whatever collation the database has.
_UL = 'UPPER(u.last_name::text) COLLATE "C"'
_UF = 'UPPER(u.first_name::text) COLLATE "C"'
_BY_LAST = f'{_UL}, u.last_name COLLATE "C", u.first_name COLLATE "C", u.id'
_BY_FIRST = f"{_UF}, {_BY_LAST}"
_EXACT_LOGIN = (
    "(UPPER(u.email::text) = UPPER(%(query)s) OR UPPER(u.username::text) = UPPER(%(query)s))"
)
_EXACT = f"({_UL} = UPPER(%(first)s) OR {_UF} = UPPER(%(first)s) OR {_EXACT_LOGIN})"
_STARTS = f"({_UL} LIKE UPPER(%(prefix)s) OR {_UF} LIKE UPPER(%(prefix)s))"


def name_search_rows(*, query: str, limit: int) -> list[tuple[int, str, str, str, str]]:
    """Logins (id, first and last name, e-mail, username) of members whose names, e-mail or
    login match every word, best first: a name equal to the first word or the e-mail/login
    equal to the query (by last name), then last names starting with the first word (by last
    name), then first names starting with it (by first name), then any other match (unless
    the query was a whole e-mail address or login).

    One statement, read tier by tier: a tier stops at `limit` and runs only while the tiers
    before it found fewer. A single word may match thousands (a common last name), so each
    tier walks a name index in its own order and reads about `limit` entries instead of
    ranking and sorting all of them; the last tier (the word inside a name, e-mail or login)
    has no index order and takes its first `limit` by login id (the planner walks the primary
    key for a common word, or collects the few matches of a rare one with the trigram
    indexes). Every further word narrows the matches to a few hundred at most, so several
    words collect their matches once with the trigram indexes and rank those.
    """
    terms = query.split()
    if len(terms) > 1:
        return _several_words(query=query, terms=terms, limit=limit)
    params: dict[str, object] = {
        "query": query,
        "first": terms[0],
        "prefix": connection.ops.prep_for_like_query(terms[0]) + "%",
        "limit": limit,
    }
    # Every word must match: anywhere for three letters or more (trigram GIN indexes), only
    # at the start of a name, e-mail or login for shorter ones (a substring of one or two
    # letters matches nearly everybody, and no trigram index can narrow it).
    every_word = []
    for n, term in enumerate(terms):
        like = connection.ops.prep_for_like_query(term)
        params[f"w{n}"] = f"%{like}%" if len(term) >= 3 else f"{like}%"
        every_word.append(
            "("
            + " OR ".join(
                f"UPPER(u.{col}::text) LIKE UPPER(%(w{n})s)"
                for col in ("first_name", "last_name", "email", "username")
            )
            + ")"
        )
    cols = "u.id, u.first_name, u.last_name, u.email, u.username"
    # OFFSET 0 keeps the membership test a per-row subplan: as a semi-join in each of the eight
    # scans, planning took longer than running the statement (3 ms instead of 1.7 ms).
    member = f"EXISTS (SELECT FROM {Member._meta.db_table} m WHERE m.user_id = u.id OFFSET 0)"
    if len(terms) == 1:
        # A name equal to or starting with the word contains it: only the last tier tests it.
        source, matches, test, test_all = "auth_user", "", member, f"{every_word[0]} AND {member}"
    else:
        source, test, test_all = "matches", "TRUE", "TRUE"
        matches = (
            f"matches AS MATERIALIZED (SELECT {cols} FROM auth_user u "
            f"WHERE {' AND '.join(every_word)} AND {member}),"
        )

    def first_of(where: str, order: str, *, gate: tuple[str, ...] = (), test: str = test) -> str:
        # The first `limit` of `where` in `order`; with `gate`, only while those tiers found
        # fewer than `limit` (a one-time filter: the scan does not start otherwise).
        if gate:
            where = (
                " + ".join(f"(SELECT count(*) FROM {t})" for t in gate)
                + f" < %(limit)s AND {where}"
            )
        rows = f"SELECT {cols} FROM {source} u WHERE {where} AND {test}"
        return f"{rows} ORDER BY {order} LIMIT %(limit)s"

    def numbered(rows: str, shown: str = _BY_LAST) -> str:
        return f"SELECT {cols}, row_number() OVER (ORDER BY {shown}) AS pos FROM ({rows}) u"

    # Equal to the query: a last or a first name (each walks its index in last-name order),
    # an e-mail address or a login typed in full; merged, each login once.
    exact = " UNION ".join(
        f"({first_of(where, order)})"
        for where, order in (
            (f"{_UL} = UPPER(%(first)s)", _BY_LAST),
            (f"{_UF} = UPPER(%(first)s)", _BY_FIRST),
            ("UPPER(u.email::text) = UPPER(%(query)s)", "u.id"),
            ("UPPER(u.username::text) = UPPER(%(query)s)", "u.id"),
        )
    )
    last_starts = f"{_UL} LIKE UPPER(%(prefix)s) AND NOT {_EXACT}"
    first_starts = (
        f"{_UF} LIKE UPPER(%(prefix)s) AND NOT {_UL} LIKE UPPER(%(prefix)s) AND NOT {_EXACT}"
    )
    # (A name equal to the first word starts with it.) An e-mail address or login typed in
    # full names its member: no search inside every address for it (the trigram index reads
    # ~100,000 entries for each common trigram of "...@example.org", 10 to 20 ms).
    typed_in_full = f"NOT EXISTS (SELECT FROM exact u WHERE {_EXACT_LOGIN})"
    elsewhere = f"{typed_in_full} AND NOT {_STARTS} AND NOT {_EXACT_LOGIN}"
    sql = f"""
        WITH {matches}
        exact AS MATERIALIZED (
            {numbered(f"SELECT * FROM ({exact}) u ORDER BY {_BY_LAST} LIMIT %(limit)s")}),
        last_starts AS MATERIALIZED (
            {numbered(first_of(last_starts, _BY_LAST, gate=("exact",)))}),
        first_starts AS MATERIALIZED (
            {numbered(first_of(first_starts, _BY_FIRST, gate=("exact", "last_starts")), _BY_FIRST)}),
        elsewhere AS MATERIALIZED (
            {numbered(first_of(elsewhere, "u.id", gate=("exact", "last_starts", "first_starts"), test=test_all))})
        SELECT id, first_name, last_name, email, username FROM (
            SELECT 0 AS tier, * FROM exact UNION ALL SELECT 1, * FROM last_starts
            UNION ALL SELECT 2, * FROM first_starts UNION ALL SELECT 3, * FROM elsewhere
        ) ranked ORDER BY tier, pos LIMIT %(limit)s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()]


def _several_words(
    *, query: str, terms: list[str], limit: int
) -> list[tuple[int, str, str, str, str]]:
    """Several words ("anna lee"): every further word narrows the matches to a few, so one
    ranked query with a limit over the trigram and prefix indexes is cheapest (13-16 ms p95 at
    100,000 members; the tiered statement above collected every match of each word first and
    took 45-57 ms). Ranked like the tiers: a name equal to the first word or the e-mail/login
    equal to the query, then names starting with the first word, then the rest."""
    from django.contrib.auth import get_user_model
    from django.db.models import Case, Exists, IntegerField, OuterRef, Q, Value, When

    condition = Q()
    for term in terms:
        if len(term) >= 3:
            condition &= (
                Q(first_name__icontains=term)
                | Q(last_name__icontains=term)
                | Q(email__icontains=term)
                | Q(username__icontains=term)
            )
        else:  # one or two letters: only the start of a name or login counts
            condition &= (
                Q(first_name__istartswith=term)
                | Q(last_name__istartswith=term)
                | Q(username__istartswith=term)
                | Q(email__istartswith=term)
            )
    first = terms[0]
    rank = Case(
        When(
            Q(last_name__iexact=first)
            | Q(first_name__iexact=first)
            | Q(email__iexact=query)
            | Q(username__iexact=query),
            then=Value(0),
        ),
        When(Q(last_name__istartswith=first), then=Value(1)),
        When(Q(first_name__istartswith=first), then=Value(2)),
        default=Value(3),
        output_field=IntegerField(),
    )
    users = (
        get_user_model()
        .objects.filter(condition, Exists(Member.objects.filter(user_id=OuterRef("pk"))))
        .annotate(search_rank=rank)
        .order_by("search_rank", "last_name", "first_name", "pk")
        .values_list("pk", "first_name", "last_name", "email", "username")
    )
    return list(users[:limit])
