"""Stored passwords: Argon2id first (the production hasher list), old hashes rewritten at login,
wrong passwords still counted by the lockout whatever the stored hash."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import identify_hasher, make_password
from django.test import override_settings
from django.urls import reverse
from rest_framework.authtoken.models import Token

import portal.settings as production
from apps.accounts.hashers import PortalArgon2PasswordHasher
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

# The test settings use a fast MD5 hasher; these tests run with the production list.
production_hashers = override_settings(PASSWORD_HASHERS=production.PASSWORD_HASHERS)


def login(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def stored(username):
    return get_user_model().objects.get(username=username).password


@production_hashers
def test_a_new_password_is_stored_as_argon2id_with_the_portal_parameters(make_user):
    user = make_user("vera")
    user.set_password("a long new passphrase")
    user.save()
    encoded = stored("vera")
    assert encoded.startswith("argon2$argon2id$")
    assert "m=47104,t=1,p=2" in encoded
    assert user.check_password("a long new passphrase")
    assert not user.check_password("a long new passphras")


@production_hashers
@pytest.mark.parametrize("old_hasher", ["pbkdf2_sha256", "pbkdf2_sha1"])
def test_an_old_hash_is_upgraded_to_argon2_at_the_next_login(client, make_user, old_hasher):
    user = make_user("vera")
    get_user_model().objects.filter(pk=user.pk).update(
        password=make_password(PASSWORD, hasher=old_hasher)
    )
    token = Token.objects.create(user=user)
    assert identify_hasher(stored("vera")).algorithm == old_hasher

    response = login(client, "vera", PASSWORD)

    assert response.status_code == 302
    assert identify_hasher(stored("vera")).algorithm == PortalArgon2PasswordHasher.algorithm
    # The upgrade is not a password change: the member's API token stays.
    assert Token.objects.filter(key=token.key).exists()
    client.post(reverse("logout"))
    assert login(client, "vera", PASSWORD).status_code == 302  # the new hash works


@production_hashers
def test_an_argon2_hash_with_weaker_parameters_is_rewritten_at_login(client, make_user):
    user = make_user("vera")

    class Weak(PortalArgon2PasswordHasher):
        time_cost = 1
        memory_cost = 8192
        parallelism = 1

    weak = Weak().encode(PASSWORD, "saltsaltsalt")
    assert "m=8192,t=1,p=1" in weak
    get_user_model().objects.filter(pk=user.pk).update(password=weak)

    assert login(client, "vera", PASSWORD).status_code == 302
    assert "m=47104,t=1,p=2" in stored("vera")


@production_hashers
def test_a_wrong_password_leaves_an_old_hash_alone_and_counts_toward_the_lockout(client, make_user):
    user = make_user("vera")
    old = make_password(PASSWORD, hasher="pbkdf2_sha256")
    get_user_model().objects.filter(pk=user.pk).update(password=old)

    for _ in range(4):
        assert login(client, "vera", "wrong").status_code == 200
    assert stored("vera") == old  # not rewritten by a failed attempt
    assert login(client, "vera", "wrong").status_code == 429  # the fifth locks
    response = login(client, "vera", PASSWORD)
    assert response.status_code == 429  # locked, even with the right password
    assert stored("vera") == old
    assert client.get(reverse("members:dashboard")).status_code == 302
