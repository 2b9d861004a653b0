"""The second sign-in step: the code page, enrolment, recovery codes, turning it off."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import django_otp
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.forms import CodeForm
from apps.accounts.twofactor import (
    ENROLLED_KEY,
    CodeCheck,
    recovery_codes_left,
    recovery_codes_regenerate,
    second_factor_check,
    second_factor_disable,
    second_factor_enabled,
    second_factor_locked_until,
    second_factor_required,
    second_factor_satisfied,
    staff_must_use,
    totp_enrol_confirm,
    totp_enrol_start,
    totp_qr_svg,
    totp_secret_text,
)

NEW_CODES_KEY = "second_factor_new_codes"


def _next_url(request: HttpRequest) -> str:
    """Where to go after the second step: a local `next`, or the home page."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("home")


def _verified(request: HttpRequest, device: Any) -> None:
    """Mark the session as having passed the second step (a new session key for the new rights)."""
    request.session.cycle_key()
    django_otp.login(request, device)


def _locked(request: HttpRequest, until: datetime) -> HttpResponse:
    """End the half-signed-in session and say until when codes are refused."""
    logout(request)
    return render(request, "accounts/two_factor_locked.html", {"until": until}, status=429)


def _wrong_code_error(check: CodeCheck) -> str:
    return _(
        "This code is wrong or was used already. %(left)d more wrong codes lock the second step."
    ) % {"left": check.tries_left}


class SecondFactorVerifyView(LoginRequiredMixin, View):
    """After the password: the code from the app, or one recovery code."""

    template = "accounts/two_factor_verify.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        if second_factor_satisfied(request):
            return redirect(_next_url(request))
        if not second_factor_enabled(request.user):
            return redirect(f"{reverse('accounts:two_factor_setup')}?{request.GET.urlencode()}")
        until = second_factor_locked_until(request.user)
        if until is not None:
            return _locked(request, until)
        return render(request, self.template, {"form": CodeForm(), "next": _next_url(request)})

    def post(self, request: HttpRequest) -> HttpResponse:
        if second_factor_satisfied(request):
            return redirect(_next_url(request))
        if not second_factor_enabled(request.user):
            return redirect("accounts:two_factor_setup")
        form = CodeForm(request.POST)
        if form.is_valid():
            check = second_factor_check(user=request.user, code=form.cleaned_data["code"])
            if check.ok:
                _verified(request, check.device)
                return redirect(_next_url(request))
            if check.locked_until is not None:
                return _locked(request, check.locked_until)
            form.add_error("code", _wrong_code_error(check))
        context = {"form": form, "next": _next_url(request)}
        return render(request, self.template, context, status=400)


class SecondFactorSetupView(LoginRequiredMixin, View):
    """Enrolment: scan the QR code (or type the secret), confirm with a first code."""

    template = "accounts/two_factor_setup.html"

    def _page(self, request: HttpRequest, form: CodeForm, status: int = 200) -> HttpResponse:
        device = totp_enrol_start(user=request.user)
        context = {
            "form": form,
            "qr_svg": totp_qr_svg(device),
            "secret": totp_secret_text(device),
            "required": staff_must_use(request.user),
            "next": _next_url(request),
        }
        return render(request, self.template, context, status=status)

    def get(self, request: HttpRequest) -> HttpResponse:
        if second_factor_enabled(request.user):
            # Replacing an authenticator needs the old one first (turn off, then set up again).
            verified = second_factor_satisfied(request)
            return redirect("accounts:two_factor" if verified else "accounts:two_factor_verify")
        return self._page(request, CodeForm())

    def post(self, request: HttpRequest) -> HttpResponse:
        if second_factor_enabled(request.user):
            return redirect("accounts:two_factor")
        form = CodeForm(request.POST)
        if form.is_valid():
            device = totp_enrol_start(user=request.user)
            code = form.cleaned_data["code"]
            codes = totp_enrol_confirm(user=request.user, device=device, code=code)
            if codes is not None:
                device.refresh_from_db()
                _verified(request, device)
                request.session[ENROLLED_KEY] = True
                request.session[NEW_CODES_KEY] = codes
                query = urlencode({"next": _next_url(request)})
                return redirect(f"{reverse('accounts:two_factor_codes')}?{query}")
            form.add_error(
                "code",
                _(
                    "This code does not match. Type the code the app shows now; if it still does "
                    "not match, check that the phone's clock is set automatically."
                ),
            )
        return self._page(request, form, status=400)


class RecoveryCodesView(LoginRequiredMixin, View):
    """The new recovery codes, shown once (they are stored only as used-up-on-use tokens)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        codes = request.session.pop(NEW_CODES_KEY, None)
        if not codes:
            return redirect("accounts:two_factor")
        return render(
            request, "accounts/two_factor_codes.html", {"codes": codes, "next": _next_url(request)}
        )


class SecondFactorView(LoginRequiredMixin, View):
    """The account's second step: on or off, recovery codes left, and what can be done."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, "accounts/two_factor.html", _manage_context(request))


def _manage_context(request: HttpRequest, **forms: CodeForm) -> dict[str, Any]:
    user = request.user
    return {
        "enabled": second_factor_enabled(user),
        "required": staff_must_use(user),
        "codes_left": recovery_codes_left(user),
        "regenerate_form": forms.get("regenerate_form", CodeForm(prefix="regenerate")),
        "disable_form": forms.get("disable_form", CodeForm(prefix="disable")),
    }


class _CodeConfirmedAction(LoginRequiredMixin, View):
    """A change to the second step that needs a current code first (counted like sign-in)."""

    prefix = ""

    def act(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    def post(self, request: HttpRequest) -> HttpResponse:
        if not second_factor_enabled(request.user):
            return redirect("accounts:two_factor")
        if not second_factor_satisfied(request):
            return redirect("accounts:two_factor_verify")
        form = CodeForm(request.POST, prefix=self.prefix)
        if form.is_valid():
            check = second_factor_check(user=request.user, code=form.cleaned_data["code"])
            if check.ok:
                return self.act(request)
            if check.locked_until is not None:
                return _locked(request, check.locked_until)
            form.add_error("code", _wrong_code_error(check))
        context = _manage_context(request, **{f"{self.prefix}_form": form})
        return render(request, "accounts/two_factor.html", context, status=400)


class RecoveryCodesRegenerateView(_CodeConfirmedAction):
    """New recovery codes; the old ones stop working."""

    prefix = "regenerate"

    def act(self, request: HttpRequest) -> HttpResponse:
        request.session[NEW_CODES_KEY] = recovery_codes_regenerate(user=request.user)
        return redirect("accounts:two_factor_codes")


class SecondFactorDisableView(_CodeConfirmedAction):
    """Turn the second step off (staff under the setting are asked to set it up again)."""

    prefix = "disable"

    def act(self, request: HttpRequest) -> HttpResponse:
        second_factor_disable(user=request.user)
        request.session.pop(django_otp.DEVICE_ID_SESSION_KEY, None)
        request.session[ENROLLED_KEY] = False
        if second_factor_required(request.user):
            return redirect("accounts:two_factor_setup")
        messages.success(request, _("The second step is off; the password alone signs you in."))
        return redirect("accounts:two_factor")
