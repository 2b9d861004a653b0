"""A new password revokes the account's API tokens (reset, change, admin or manage.py): whoever
learnt the old password may also have created a token with it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_save
from django.dispatch import receiver
from rest_framework.authtoken.models import Token


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="tokens_revoke_on_password")
def tokens_revoke_on_password(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """After set_password() + save(): delete the user's tokens. Django keeps the raw password in
    `_password` until that save; a hash upgrade at login clears it first, so it revokes nothing."""
    if created or getattr(instance, "_password", None) is None:
        return
    Token.objects.filter(user=instance).delete()
