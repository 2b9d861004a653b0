"""The password-reset form with its rate limits, routed before Django's own auth URLs and
outside the `accounts` namespace: Django's auth views reverse it by its bare name."""

from django.urls import path

from apps.accounts.password_reset import PasswordResetView

urlpatterns = [
    path("accounts/password_reset/", PasswordResetView.as_view(), name="password_reset"),
]
