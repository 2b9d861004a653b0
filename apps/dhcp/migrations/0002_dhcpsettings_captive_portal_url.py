from django.db import migrations, models

import apps.dhcp.models


class Migration(migrations.Migration):
    dependencies = [("dhcp", "0001_dhcp")]

    operations = [
        migrations.AddField(
            model_name="dhcpsettings",
            name="captive_portal_url",
            field=models.CharField(
                blank=True,
                help_text="https://<portal name>/api/captive-portal/ (RFC 8908). Set: leases from the registration ranges carry it (DHCP option 114), and a walled device's HTTP to any address goes to the first portal address, whose proxy redirects it to the “not registered” page. Empty: neither.",
                max_length=255,
                validators=[apps.dhcp.models.validate_captive_portal_url],
                verbose_name="captive-portal API URL",
            ),
        ),
    ]
