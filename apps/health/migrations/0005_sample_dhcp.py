from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("health", "0004_sample_conntrack")]

    operations = [
        migrations.AddField(
            model_name="hosthealthsample",
            name="dhcp",
            field=models.JSONField(blank=True, default=dict, verbose_name="DHCP state"),
        ),
    ]
