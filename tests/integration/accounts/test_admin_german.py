"""Issue 25: the admin pages say it in German on German pages, the third-party apps' too
(django-otp's devices had no translatable labels: "Throttling failure count", "Otp_Totp").
Every admin index, list and add page is read in English and German; a label, column, heading
or app name that reads the same in both is untranslated, unless German writes it the same."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import NoReverseMatch, reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

# Words German writes as English does.
SAME_IN_GERMAN = {
    "Name", "DHCP", "Firewalls", "Support", "Text", "Ports", "Status", "Token", "Download (kbit/s)",
    "Upload (kbit/s)", "6", "8", "IPv4", "IPv6", "MAC", "ID", "E-Mail",
}  # fmt: skip
LABELS = re.compile(
    r'<label[^>]*>(.*?)</label>|<th[^>]*scope="col"[^>]*>(.*?)</th>|<caption>(.*?)</caption>'
    r'|<th scope="row"><a[^>]*>(.*?)</a>|<h2[^>]*>(.*?)</h2>|<h3>(.*?)</h3>',
    re.S,
)


def labels(page: str) -> set[str]:
    found = set()
    for match in LABELS.finditer(page):
        text = next(g for g in match.groups() if g is not None)
        text = html.unescape(re.sub(r"<[^>]+>", "", text)).strip().rstrip(":").strip()
        if text and not text.isdigit():
            found.add(text)
    return found


def admin_urls() -> list[str]:
    urls = [reverse("admin:index")]
    for model in admin.site._registry:
        info = (model._meta.app_label, model._meta.model_name)
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        try:
            urls.append(reverse("admin:{}_{}_add".format(*info)))
        except NoReverseMatch:
            continue
    return urls


def test_admin_pages_have_no_english_label_on_german_pages():
    client = Client()
    client.force_login(UserFactory(roles=["admin"], is_staff=True, is_superuser=True))
    untranslated = {}
    for url in admin_urls():
        english = client.get(url, HTTP_ACCEPT_LANGUAGE="en")
        german = client.get(url, HTTP_ACCEPT_LANGUAGE="de")
        if english.status_code != 200:
            continue  # an admin without add permission
        assert german.status_code == 200, url
        same = labels(english.content.decode()) & labels(german.content.decode())
        same -= SAME_IN_GERMAN
        if same:
            untranslated[url] = sorted(same)
    assert untranslated == {}


def test_the_device_admins_read_in_german():
    client = Client()
    client.force_login(UserFactory(roles=["admin"], is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:otp_totp_totpdevice_add"), HTTP_ACCEPT_LANGUAGE="de")
    text = page.content.decode()
    assert "Fehlversuche in Folge" in text
    assert "Authentifizierungs-Apps (TOTP)" in text
    assert "Authentifizierungs-App hinzufügen" in text  # the model's name
    assert "Wie viele Sekunden jeder Code gilt." in text  # its help texts
    assert "Throttling failure count" not in text
    assert "TOTP device" not in text
    assert "The time step in seconds." not in text


def test_the_device_admins_list_and_show_a_device():
    from django_otp.plugins.otp_static.models import StaticDevice
    from django_otp.plugins.otp_totp.models import TOTPDevice

    owner = UserFactory()
    totp = TOTPDevice.objects.create(user=owner, name="phone", confirmed=True)
    static = StaticDevice.objects.create(user=owner, name="backup", confirmed=True)
    static.token_set.create(token="12345678")
    client = Client()
    client.force_login(UserFactory(roles=["admin"], is_staff=True, is_superuser=True))
    for model, device in (("totp/totpdevice", totp), ("static/staticdevice", static)):
        listing = client.get(f"/admin/otp_{model}/", HTTP_ACCEPT_LANGUAGE="de")
        assert listing.status_code == 200
        assert "zuletzt benutzt" in listing.content.decode()
        change = client.get(f"/admin/otp_{model}/{device.pk}/change/", HTTP_ACCEPT_LANGUAGE="de")
        assert change.status_code == 200
        assert "Zeiten" in change.content.decode()
