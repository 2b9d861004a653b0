"""Test accesses have their own app now (apps.testaccess): the model leaves network's state.

State only: the table `network_testaccess` and its rows stay; testaccess 0001 owns them.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("network", "0008_syn_proxy"),
        ("testaccess", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="TestAccess")],
            database_operations=[],
        ),
    ]
