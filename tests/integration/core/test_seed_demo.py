"""seed_demo: deterministic, idempotent, growing, refused without DEBUG."""

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db
User = get_user_model()


def people():
    return list(
        User.objects.order_by("username").values_list(
            "username", "first_name", "last_name", "password"
        )
    )


@pytest.fixture
def debug_on(settings):
    settings.DEBUG = True


def test_demo_logins_exist_with_their_roles(debug_on, rf):
    call_command("seed_demo", members=3, seed=7)
    for name, role in [
        ("resident", "member"),
        ("volunteer", "volunteer"),
        ("support", "support"),
        ("admin", "admin"),
    ]:
        user = authenticate(rf.post("/"), username=name, password="demo")
        assert user is not None, name
        assert list(user.groups.values_list("name", flat=True)) == [role]
    assert User.objects.get(username="admin").is_superuser
    assert User.objects.filter(username__startswith="member").count() == 3


def test_running_again_changes_nothing(debug_on):
    call_command("seed_demo", members=5, seed=7)
    before = people()
    call_command("seed_demo", members=5, seed=7)
    assert people() == before


def test_a_larger_count_adds_only_the_missing_members(debug_on):
    call_command("seed_demo", members=5, seed=7)
    before = people()
    call_command("seed_demo", members=8, seed=7)
    after = people()
    assert len(after) == len(before) + 3
    assert set(before) <= set(after)


def test_same_seed_gives_the_same_people(debug_on):
    call_command("seed_demo", members=10, seed=3)
    first = [(u, f, last) for u, f, last, _ in people()]
    User.objects.all().delete()
    call_command("seed_demo", members=10, seed=3)
    assert [(u, f, last) for u, f, last, _ in people()] == first


def test_refused_without_debug_unless_forced(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG is off"):
        call_command("seed_demo", members=1)
    assert not User.objects.exists()
    call_command("seed_demo", members=1, force=True)
    assert User.objects.filter(username="resident").exists()


def test_negative_count_is_refused(debug_on):
    with pytest.raises(CommandError, match="--members"):
        call_command("seed_demo", members=-1)
