from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

THIRD_PARTY_NAMES = {
    "otp_totp": _("Authenticator apps (TOTP)"),
    "otp_static": _("Backup codes"),
    "axes": _("Login lockouts"),
}


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = _("Accounts")

    def ready(self) -> None:
        from django.apps import apps

        from apps.accounts import signals  # noqa: F401 - connects the receivers

        # Third-party apps without a translatable name ("Otp_Totp" on German admin pages).
        for label, name in THIRD_PARTY_NAMES.items():
            if label in apps.app_configs:
                apps.get_app_config(label).verbose_name = name
