"""The public sign-up page (no login): parse -> service -> log the new member in."""

from __future__ import annotations

from axes.helpers import get_client_ip_address
from django.contrib import messages
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views import View

from apps.core.errors import NetworkError
from apps.members.signup import member_sign_up, signup_succeeded, signup_throttled
from apps.members.signup_forms import SignUpForm


class SignUpView(View):
    """A resident signs up with their room; they are pending until checked in at office hours."""

    template = "members/signup.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            return redirect("members:dashboard")
        return render(request, self.template, {"form": SignUpForm()})

    def post(self, request: HttpRequest) -> HttpResponse:
        ip = get_client_ip_address(request) or "unknown"
        form = SignUpForm(request.POST)
        if signup_throttled(ip=ip):
            return render(request, self.template, {"form": form, "throttled": True}, status=429)
        if form.is_valid():
            data = form.cleaned_data
            try:
                member = member_sign_up(
                    first_name=data["first_name"],
                    last_name=data["last_name"],
                    email=data["email"],
                    room=data["room"],
                    password=data["password1"],
                    phone=data["phone"],
                )
            except NetworkError as exc:  # e.g. the same address signed up a moment ago
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                signup_succeeded(ip=ip)
                login(request, member.user, backend="django.contrib.auth.backends.ModelBackend")
                messages.success(
                    request,
                    _(
                        "Welcome! You are signed up for room %(room)s. Come to the office hours "
                        "with your ID to be checked in."
                    )
                    % {"room": member.room.label},
                )
                return redirect("members:dashboard")
        status = 400 if form.has_error("__all__", "spam") else 422
        return render(request, self.template, {"form": form}, status=status)
