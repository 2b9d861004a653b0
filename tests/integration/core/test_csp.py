"""The Content-Security-Policy: on every page type, the portal's own scripts and styles only."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.firewall.models import FirewallHost
from apps.tickets.models import Incident
from apps.tickets.services import ticket_open
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db

STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "frame-ancestors": "'none'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
}


def policy(response) -> dict[str, str]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"no Content-Security-Policy on {response.request['PATH_INFO']}"
    return dict([*part.strip().split(" ", 1), ""][:2] for part in header.split(";") if part.strip())


def assert_strict(response) -> None:
    directives = policy(response)
    for name, value in STRICT.items():
        assert directives.get(name) == value, (response.request["PATH_INFO"], name, directives)
    header = response.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in header
    assert "unsafe-eval" not in header


def assert_no_inline_code(response) -> None:
    """Nothing the policy would block: no inline script or style, no handler attribute."""
    html = response.content.decode()
    assert not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", html), "inline <script>"
    assert "<style" not in html, "inline <style>"
    assert not re.search(r"\sstyle=[\"']", html), "style attribute"
    assert not re.search(r"\son[a-z]+=[\"']", html), "inline event handler"


@pytest.fixture
def objects(make_user):
    member = member_active()
    device_add(member, "laptop")
    ticket = ticket_open(actor=member.user, subject="Slow Wi-Fi", body="Since yesterday.")
    incident = Incident.objects.create(title="Uplink down")
    FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    return {"member": member, "ticket": ticket, "incident": incident}


def pages(objects) -> dict[str, list[str]]:
    member, ticket, incident = objects["member"], objects["ticket"], objects["incident"]
    return {
        "anonymous": [
            reverse("login"),
            reverse("password_reset"),
            reverse("members:signup"),
            reverse("tickets:status_page"),
            "/no-such-page/",
        ],
        "member": [
            reverse("members:dashboard"),
            reverse("tickets:my_tickets"),
            reverse("tickets:my_ticket", args=[ticket.pk]),
            reverse("accounts:two_factor"),
            reverse("accounts:two_factor_setup"),
            reverse("api-docs"),
            reverse("members:office_hours"),  # 403 page
        ],
        "admin": [
            reverse("members:office_hours"),
            reverse("members:member_detail", args=[member.pk]),
            reverse("firewall:host_list"),
            reverse("firewall:host_detail", args=["pl-nat1"]),
            reverse("tickets:inbox"),
            reverse("tickets:ticket_detail", args=[ticket.pk]),
            reverse("tickets:incident_list"),
            reverse("tickets:incident_detail", args=[incident.pk]),
            reverse("tickets:stats"),
            reverse("health:system"),
            reverse("admin:index"),
            reverse("admin:auth_user_changelist"),
            reverse("admin:auth_user_change", args=[member.user.pk]),
            reverse("admin:members_member_changelist"),
        ],
    }


def test_every_page_type_carries_the_strict_policy_and_no_inline_code(objects, make_user):
    clients = {"anonymous": Client(), "member": Client(), "admin": Client()}
    clients["member"].force_login(objects["member"].user)
    clients["admin"].force_login(make_user(roles=("admin",)))
    seen = 0
    for who, paths in pages(objects).items():
        for path in paths:
            response = clients[who].get(path)
            assert response.status_code in (200, 403, 404), (who, path, response.status_code)
            assert_strict(response)
            if not path.startswith("/admin/"):  # Django's own admin templates are its own
                assert_no_inline_code(response)
            seen += 1
    assert seen == 26


def test_the_status_page_from_its_fast_path_carries_the_policy_too():
    client = Client()
    client.get(reverse("tickets:status_page"))  # warms the cache
    assert_strict(client.get(reverse("tickets:status_page")))


def test_an_htmx_fragment_carries_the_policy(objects):
    client = Client()
    client.force_login(objects["member"].user)
    response = client.get(
        reverse("network:device_section", args=[objects["member"].pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert_strict(response)


def test_the_api_docs_start_swagger_ui_from_a_file(objects):
    client = Client()
    client.force_login(objects["member"].user)
    page = client.get(reverse("api-docs"))
    assert_strict(page)
    script = re.search(r'<script src="([^"]*\?[^"]*script=[^"]*)"', page.content.decode())
    assert script, "the start-up script is loaded from the portal, not inline"
    response = client.get(script.group(1).replace("&amp;", "&"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in response.content.decode()


def test_htmx_is_told_not_to_inject_styles_or_eval(objects):
    client = Client()
    client.force_login(objects["member"].user)
    html = client.get(reverse("members:dashboard")).content.decode()
    assert '"includeIndicatorStyles": false' in html
    assert '"allowEval": false' in html
