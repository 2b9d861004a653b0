"""Shared by the API tests: a logged-in client."""

from django.test import Client


def login(user) -> Client:
    """A test client with `user`'s session (the API accepts session and token)."""
    client = Client()
    client.force_login(user)
    return client
