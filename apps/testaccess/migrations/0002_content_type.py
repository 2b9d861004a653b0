"""The content type of test accesses moves with the model (network -> testaccess).

An existing database has the row `network | testaccess` (its permissions and any generic
relation point at its id): it is relabelled, so they keep pointing at it. A new database has
no row yet (post_migrate creates `testaccess | testaccess` after all migrations).
"""

from django.db import migrations


def _relabel(apps, schema_editor, old: str, new: str) -> None:
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    if content_types.filter(app_label=new, model="testaccess").exists():
        return  # created by an earlier migrate run: leave both as they are
    content_types.filter(app_label=old, model="testaccess").update(app_label=new)


def forwards(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, "network", "testaccess")


def backwards(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, "testaccess", "network")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("testaccess", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
