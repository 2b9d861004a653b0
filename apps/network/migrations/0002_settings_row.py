from django.db import migrations


def create_settings(apps, schema_editor):
    apps.get_model("network", "NetworkSettings").objects.get_or_create(id=1)


class Migration(migrations.Migration):
    dependencies = [("network", "0001_initial")]

    operations = [migrations.RunPython(create_settings, migrations.RunPython.noop)]
