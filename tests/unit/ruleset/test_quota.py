"""Per-member conntrack quotas and uplink anti-spoofing in the compiled rule set (issue 15)."""

from __future__ import annotations

from workers.ruleset import Host, Policy, Snapshot, compile_snapshot


def nft(policy: Policy, **host) -> str:
    values = {"name": "fw", "uplink_interfaces": ("inet0",), "member_interfaces": ("dorm0",)}
    return compile_snapshot(Snapshot(policy=policy, host=Host(**(values | host)))).nft


def chain(text: str, name: str) -> str:
    start = text.index(f"\tchain {name} {{")
    return text[start : text.index("\n\t}", start)]


def test_quotas_off_compile_to_nothing():
    text = nft(Policy())
    assert "ct count" not in text
    assert "quota_hit" not in text
    assert "chain quota_out" not in text


def test_devices_quota_counts_per_public_address_after_snat_and_per_64():
    text = nft(Policy(conntrack_quota_out=500))
    post = chain(text, "quota_out")
    assert "type filter hook postrouting priority srcnat + 1" in post
    assert "ct status snat add @ct_out4 { ct reply ip daddr ct count over 500 }" in post
    assert "update @quota_hit4 { ct reply ip daddr } counter drop" in post
    v6 = chain(text, "from_members")
    assert "add @ct_out6 { ip6 saddr & ffff:ffff:ffff:ffff:: ct count over 500 }" in v6
    assert "ct count" not in chain(text, "to_members")


def test_forwards_quota_counts_per_public_address_before_dnat_ahead_of_the_accept():
    to_members = chain(nft(Policy(conntrack_quota_in=300)), "to_members").splitlines()
    quota = next(i for i, r in enumerate(to_members) if "ct_in4" in r)
    accept = next(i for i, r in enumerate(to_members) if r.strip() == "ct status dnat goto in_pass")
    assert quota < accept
    assert "ct original ip daddr ct count over 300" in to_members[quota]


def test_hit_sets_forget_after_an_hour_and_count():
    text = nft(Policy(conntrack_quota_out=1, conntrack_quota_in=1))
    hit = text[text.index("\tset quota_hit4 {") :].split("\t}", 1)[0]
    assert "flags dynamic, timeout" in hit
    assert "timeout 1h" in hit
    assert "counter" in hit


def test_member_and_management_sources_from_the_uplink_die_early():
    early = chain(
        nft(Policy(), management_interfaces=("mgmt0",), private_networks=("10.100.0.0/16",)),
        "early",
    )
    assert 'iifname "inet0" ip saddr { 10.100.0.0/16 } counter drop' in early
    assert 'iifname "inet0" ip saddr @mgmt4 counter drop' in early


def test_a_quota_is_part_of_the_stored_snapshot_and_old_ones_stay_equal():
    with_quota = Snapshot(
        policy=Policy(conntrack_quota_out=7),
        host=Host(name="fw", uplink_interfaces=("inet0",), member_interfaces=("dorm0",)),
    )
    assert Snapshot.from_json(with_quota.to_json()) == with_quota
    plain = Snapshot(policy=Policy(), host=with_quota.host)
    assert "conntrack_quota" not in plain.to_json()
