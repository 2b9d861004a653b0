"""The address-holder history and the lookups in it; the abuse-desk role group."""

import django.contrib.postgres.constraints
import django.contrib.postgres.fields.ranges
import django.contrib.postgres.indexes
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import apps.core.fields


def create_role_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.get_or_create(name="abuse")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounts", "0001_roles"),
        ("members", "0003_search_prefix_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(create_role_group, migrations.RunPython.noop),
        migrations.CreateModel(
            name="AbuseLookup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("asked_at", models.DateTimeField(auto_now_add=True, verbose_name="asked")),
                ("actor_name", models.CharField(blank=True, max_length=150)),
                ("address", apps.core.fields.InetAddressField(verbose_name="address")),
                ("at", models.DateTimeField(verbose_name="point in time")),
                ("reason", models.CharField(max_length=500, verbose_name="reason")),
                (
                    "verdict",
                    models.CharField(
                        choices=[
                            ("held", "held"),
                            ("quarantined", "quarantined"),
                            ("nobody", "nobody"),
                        ],
                        max_length=16,
                        verbose_name="verdict",
                    ),
                ),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="who",
                    ),
                ),
                (
                    "member",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="members.member",
                    ),
                ),
            ],
            options={
                "verbose_name": "abuse lookup",
                "verbose_name_plural": "abuse lookups",
                "ordering": ["-asked_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="AddressHolding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("address", apps.core.fields.InetAddressField(verbose_name="address")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("public_ipv4", "public IPv4 of a member"),
                            ("private_ipv4", "private IPv4 of a device"),
                            ("ipv6", "IPv6 address of a device"),
                            ("lease", "DHCP lease in a registration range"),
                        ],
                        max_length=16,
                        verbose_name="kind",
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("held", "held"), ("quarantined", "quarantined")],
                        default="held",
                        max_length=16,
                        verbose_name="state",
                    ),
                ),
                (
                    "period",
                    django.contrib.postgres.fields.ranges.DateTimeRangeField(verbose_name="period"),
                ),
                (
                    "member_name",
                    models.CharField(blank=True, max_length=150, verbose_name="member"),
                ),
                (
                    "device_ref",
                    models.PositiveIntegerField(blank=True, null=True, verbose_name="device id"),
                ),
                ("device_name", models.CharField(blank=True, max_length=60, verbose_name="device")),
                (
                    "mac",
                    apps.core.fields.MacAddressField(
                        blank=True, null=True, verbose_name="MAC address"
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("recorded", "recorded when it happened"),
                            ("audit", "reconstructed from the audit trail"),
                            ("current", "reconstructed from the current state"),
                            ("dhcp", "DHCP lease read from a host"),
                        ],
                        default="recorded",
                        max_length=16,
                        verbose_name="source",
                    ),
                ),
                ("cause", models.CharField(blank=True, max_length=60, verbose_name="cause")),
                (
                    "member",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="address_holdings",
                        to="members.member",
                    ),
                ),
            ],
            options={
                "verbose_name": "address holding",
                "verbose_name_plural": "address holdings",
                "ordering": ["address", "period"],
                "constraints": [
                    django.contrib.postgres.constraints.ExclusionConstraint(
                        expressions=[
                            (
                                django.contrib.postgres.indexes.OpClass("address", name="inet_ops"),
                                "=",
                            ),
                            ("period", "&&"),
                        ],
                        name="addressholding_no_overlap",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("state", "held"), ("kind", "public_ipv4"), _connector="OR"
                        ),
                        name="addressholding_quarantine_is_public",
                    ),
                ],
            },
        ),
    ]
