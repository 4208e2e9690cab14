"""The timeline page draws any event-time join, not only the mood join (issue 48, item 1).

Scenario: a worker runs only a user's spec ``tiers`` (page views × user tiers, from a joins
file). User u1 has tiers bronze@0 and gold@20 and views at 10 and 30 (s after START).

1. ``/timeline/`` picks the join itself (the only event-time join this worker runs) and the key
   picker lists u1: two bands (bronze, gold), two marks, each in the band of the tier it joined;
2. a late tier silver@25 while the page is open: the view at 30 is corrected (was gold, now
   silver), live.
"""

from __future__ import annotations

import json
import re

from playwright.async_api import expect

from tests.broker.test_any_join_views import tiers_spec
from tests.browser.test_timeline_page import START, UI_TIMEOUT_MS, S, attrs, timeline_page, until
from tests.harness import produce, wait_for


def tier(t: int, name: str) -> tuple[str, dict]:
    return "u1", {"user": "u1", "tier": name, "at": START + t * S}


def view(t: int) -> tuple[str, dict]:
    return "u1", {"id": f"v{t}", "user": "u1", "page": f"/p{t}", "at": START + t * S}


async def test_the_page_draws_a_user_spec_and_its_live_correction(names, worker_factory, tmp_path):
    raw = tiers_spec(names.prefix)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=path).wait_http_ready()
    await produce(names, raw["dimension"]["topic"], [tier(0, "bronze"), tier(20, "gold")])

    async def held() -> bool:
        status, body = w.get("/joins/tiers/u1/")
        return status == 200 and len(body["versions"]) == 2

    assert await wait_for(held, timeout_s=60, every_s=0.3), w.get("/joins/tiers/u1/")
    await produce(names, raw["events"]["topic"], [view(10), view(30)])

    async with timeline_page(tmp_path) as (page, errors):
        await page.goto(w.url + "/timeline/")
        await expect(page).to_have_title(re.compile("etj"))
        # 1. the join chosen, its keys listed, u1 drawn
        await expect(page.locator("#join option")).to_have_text(["tiers"], timeout=UI_TIMEOUT_MS)
        await expect(page.locator("#consultant option")).to_have_text(["u1"], timeout=UI_TIMEOUT_MS)
        bands = lambda: attrs(page, "#bands rect.band", "data-mood", "data-start")  # noqa: E731
        want_bands = [("bronze", str(START)), ("gold", str(START + 20 * S))]
        assert await until(page, bands, want_bands) == want_bands
        marks = lambda: attrs(page, "#marks circle.mark", "data-id", "data-mood")  # noqa: E731
        assert await until(page, marks, [("v10", "bronze"), ("v30", "gold")]) == [
            ("v10", "bronze"),
            ("v30", "gold"),
        ]
        # 2. a late tier: the view at 30 corrected, live
        await produce(names, raw["dimension"]["topic"], [tier(25, "silver")])
        corrected = lambda: attrs(  # noqa: E731
            page,
            "#marks circle.corrected",
            "data-id",
            "data-mood",
            "data-previous-mood",
            "data-revision",
        )
        want = [("v30", "silver", "gold", "2")]
        assert await until(page, corrected, want) == want
        assert errors == []
