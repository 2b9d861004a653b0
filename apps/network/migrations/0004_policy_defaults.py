from django.db import migrations
from django.utils import timezone


def defaults(apps, schema_editor):
    """Block outbound SMTP, add a default test-access profile, profile existing test accesses."""
    BlockedPort = apps.get_model("network", "BlockedPort")
    ShapingProfile = apps.get_model("network", "ShapingProfile")
    TestAccess = apps.get_model("network", "TestAccess")
    Member = apps.get_model("members", "Member")
    BlockedPort.objects.get_or_create(
        direction="outbound",
        protocol="tcp",
        first=25,
        last=25,
        defaults={"note": "SMTP: infected devices must not send spam directly"},
    )
    profile, _created = ShapingProfile.objects.get_or_create(
        name="Test access", defaults={"down_kbit": 4000, "up_kbit": 1000, "is_default": True}
    )
    now = timezone.now()
    TestAccess.objects.bulk_create(
        [
            TestAccess(member_id=pk, profile=profile, granted_at=now)
            for pk in Member.objects.filter(status="test", test_access__isnull=True).values_list(
                "pk", flat=True
            )
        ]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("network", "0003_forwards_openings_shaping_policy"),
        ("members", "0002_search_indexes"),
    ]

    operations = [migrations.RunPython(defaults, migrations.RunPython.noop)]
