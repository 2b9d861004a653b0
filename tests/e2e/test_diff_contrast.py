"""A version diff stays readable in the light and in the dark theme: Chromium renders the page with
the system's colour scheme, and the test computes each diff line's contrast ratio (WCAG 2.x) from
the colours the browser computed out of the CSS: at least 4.5:1 for added, removed and hunk lines."""

from __future__ import annotations

import re

import pytest

from apps.firewall.models import FirewallHost
from apps.firewall.versions import ruleset_version_store
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

# The background a line's text sits on: its own, else the nearest ancestor's that is not clear.
COLOURS = """(selector) => {
  const el = document.querySelector(selector);
  let bg = el, back = getComputedStyle(bg).backgroundColor;
  while (bg && (back === 'rgba(0, 0, 0, 0)' || back === 'transparent')) {
    bg = bg.parentElement; back = bg ? getComputedStyle(bg).backgroundColor : 'rgb(255, 255, 255)';
  }
  return [getComputedStyle(el).color, back];
}"""


def _rgb(css: str) -> tuple[float, float, float]:
    numbers = [float(n) for n in re.findall(r"[\d.]+", css)[:4]]
    assert len(numbers) == 3 or numbers[3] == 1, f"{css}: a translucent colour"
    return numbers[0], numbers[1], numbers[2]


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(value: float) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground: str, background: str) -> float:
    light, dark = sorted((_luminance(_rgb(foreground)), _luminance(_rgb(background))), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_formula_matches_known_pairs():
    assert contrast("rgb(0, 0, 0)", "rgb(255, 255, 255)") == pytest.approx(21)
    assert contrast("rgb(118, 118, 118)", "rgb(255, 255, 255)") == pytest.approx(4.54, abs=0.01)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_diff_lines_meet_contrast_4_5_in_both_themes(browser, live_server, scheme):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    versions = [
        ruleset_version_store(
            host=host,
            nft_text=f"table inet portal_fw {{\n\tset {name} {{\n\t}}\n}}\n",
            tc_text="",
            content_hash=name * 64,
            counts={},
            compile_seconds=0.0,
            cause="test",
        )
        for name in ("a", "b")
    ]
    UserFactory(username="ada", roles=["admin"])
    context = browser.new_context(
        base_url=live_server.url, color_scheme=scheme, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    page.goto("/accounts/login/")
    page.locator("input[name=username]").fill("ada")
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form button[type=submit]").last.click()
    page.goto(f"/firewalls/pl-nat1/diff/?a={versions[0].pk}&b={versions[1].pk}")
    page.locator("pre.diff .diff-add").first.wait_for()
    text = page.evaluate("getComputedStyle(document.body).color")
    assert (_luminance(_rgb(text)) > 0.3) == (scheme == "dark")  # the theme did switch
    for line in (".diff-add", ".diff-del", ".diff-hunk"):
        foreground, background = page.evaluate(COLOURS, f"pre.diff {line}")
        ratio = contrast(foreground, background)
        assert ratio >= 4.5, f"{scheme} {line}: {foreground} on {background} is {ratio:.2f}:1"
    context.close()
