from django.urls import path

from apps.accounts import views

app_name = "accounts"

urlpatterns = [
    path("two-factor/", views.SecondFactorView.as_view(), name="two_factor"),
    path("two-factor/verify/", views.SecondFactorVerifyView.as_view(), name="two_factor_verify"),
    path("two-factor/setup/", views.SecondFactorSetupView.as_view(), name="two_factor_setup"),
    path("two-factor/recovery-codes/", views.RecoveryCodesView.as_view(), name="two_factor_codes"),
    path(
        "two-factor/recovery-codes/new/",
        views.RecoveryCodesRegenerateView.as_view(),
        name="two_factor_regenerate",
    ),
    path("two-factor/off/", views.SecondFactorDisableView.as_view(), name="two_factor_disable"),
]
