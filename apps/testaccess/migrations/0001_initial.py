"""Test accesses move from the network app to their own: the model's state only.

The table stays where it is (`network_testaccess`, db_table), rows and all; network's 0009
drops the model from network's state after this one adds it here. 0002 moves the content type,
so permissions and anything pointing at it by content type keep pointing at it.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("members", "0005_search_match_indexes"),
        ("network", "0008_syn_proxy"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TestAccess",
                    fields=[
                        (
                            "member",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="test_access",
                                serialize=False,
                                to="members.member",
                            ),
                        ),
                        ("granted_at", models.DateTimeField(verbose_name="granted")),
                        ("notice_sent_for", models.DateField(blank=True, null=True)),
                        (
                            "profile",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="test_accesses",
                                to="network.shapingprofile",
                                verbose_name="shaping profile",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "test access",
                        "verbose_name_plural": "test accesses",
                        "db_table": "network_testaccess",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
