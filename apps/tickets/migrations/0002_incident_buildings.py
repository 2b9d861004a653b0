"""Incidents name real buildings; free-text entries that name a building move there."""

import django.contrib.postgres.fields
from django.db import migrations, models


def _building_names(building):
    code = building.code.lower()
    return {code, building.name.lower(), f"building {code}", f"house {code}"}


def affected_to_buildings(apps, schema_editor):
    Building = apps.get_model("members", "Building")
    Incident = apps.get_model("tickets", "Incident")
    lookup = {}
    for building in Building.objects.all():
        for name in _building_names(building):
            lookup.setdefault(name, building)
    for incident in Incident.objects.exclude(affected=[]):
        services, found = [], []
        for entry in incident.affected:
            building = lookup.get(entry.strip().lower())
            (found if building else services).append(building or entry)
        if found:
            incident.buildings.add(*found)
            incident.affected = services
            incident.save(update_fields=["affected"])


def buildings_to_affected(apps, schema_editor):
    Incident = apps.get_model("tickets", "Incident")
    for incident in Incident.objects.prefetch_related("buildings"):
        names = [f"Building {b.code}" for b in incident.buildings.all()]
        if names:
            incident.affected = sorted(set(incident.affected) | set(names))
            incident.save(update_fields=["affected"])


class Migration(migrations.Migration):
    dependencies = [
        ("members", "0001_initial"),
        ("tickets", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="incident",
            name="buildings",
            field=models.ManyToManyField(
                blank=True,
                related_name="incidents",
                to="members.building",
                verbose_name="affected buildings",
            ),
        ),
        migrations.AlterField(
            model_name="incident",
            name="affected",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=80),
                blank=True,
                default=list,
                size=None,
                verbose_name="affected services",
            ),
        ),
        migrations.RunPython(affected_to_buildings, buildings_to_affected),
    ]
