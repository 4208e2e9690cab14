"""The live timeline page, end to end: a worker on the real broker, headless Debian Chromium.

Scenario (event times in seconds after START, retention 60 s):
1. two consultants; grace has moods happy@0, focused@20, tired@40, excited@60 and eight
   recommendations between 12 and 70, so her partition's stream time is 70 and its retention
   horizon 10; three zones with cars.
2. the page loads, lists both consultants, and grace is picked: four bands, eight marks, each
   mark in the band of the mood it joined, the horizon and stream-time lines at 10 and 70.
3. a late mood sad@47 is produced while the page is open: the page, polling, shows kayak@50 and
   piano@55 corrected (was tired, now sad) and lists them among the latest corrections.
4. zone 3 is picked: its four cars (car 102 moved there from zone 1) with the zone's pollution.
The screenshot of that state goes to the test's tmp dir; ``make docs-images`` sets ETJ_DOCS_IMAGES
to write docs/img/timeline.png (the docs show it) instead, so a test run leaves the tree clean.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from playwright.async_api import Page, async_playwright, expect

from app.settings import Settings
from tests.harness import Names, Worker, produce, wait_for
from tests.oracle import Mood, Recommendation, exact_mood_joins

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "app" / "web" / "static"
#: where ``make docs-images`` wants the pictures the docs show; unset: the test's tmp dir
DOCS_IMAGES_ENV = "ETJ_DOCS_IMAGES"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@asynccontextmanager
async def timeline_page(tmp_path: Path) -> AsyncIterator[tuple[Page, list[str]]]:
    """Debian's chromium, headless, with a profile of its own: (its page, the page's script
    errors as they happen); closed on the way out, pass or fail."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 720},
        )
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, errors
        finally:
            await browser.close()


PARTITIONS: int = Settings.model_fields["partitions"].default
START = 1_790_000_000_000
S = 1000
RETENTION_MS = 60 * S
UI_TIMEOUT_MS = 60_000

GRACE_MOODS = [(0, "happy"), (20, "focused"), (40, "tired"), (60, "excited")]
GRACE_RECS = [
    (12, "phone"),
    (18, "bike"),
    (27, "coffee"),
    (33, "book"),
    (45, "tent"),
    (50, "kayak"),
    (55, "piano"),
    (70, "laptop"),
]
ADA_MOODS = [(2, "bored"), (30, "happy")]
ADA_RECS = [(8, "tent"), (35, "bike"), (64, "phone")]
LATE_MOOD = (47, "sad")  # arrives last: corrects kayak@50 and piano@55 (tired -> sad)
ZONES = {1: 12.5, 2: 48.0, 3: 81.5}
CARS = [(101, 1), (102, 1), (103, 2), (104, 3), (105, 3), (106, 3), (102, 3)]  # 102 moves 1 -> 3


def partition_of(key: str) -> int:
    parts = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key.encode(), parts, parts))


def mood(who: str, t: int, m: str) -> tuple[str, dict[str, Any]]:
    return who, {"name": who, "mood": m, "event_time": START + t * S}


def rec(who: str, t: int, r: str) -> tuple[str, dict[str, Any]]:
    return who, {
        "consultant": who,
        "recommendation": r,
        "event_time": START + t * S,
        "id": f"{who}-{r}-{t}",
    }


def expected_marks(
    moods: list[tuple[int, str]], recs: list[tuple[int, str]], who: str
) -> dict[str, str | None]:
    """join id -> mood, by the batch rule (the page must agree with it)."""
    answer = exact_mood_joins(
        [Mood(who, m, START + t * S) for t, m in moods],
        [Recommendation(who, r, START + t * S, f"{who}-{r}-{t}") for t, r in recs],
    )
    return {jid: row[4] for jid, row in answer.items()}


async def attrs(page: Page, selector: str, *names: str) -> list[tuple[str | None, ...]]:
    """Attributes of every element matching ``selector``, in document order."""
    out = []
    for handle in await page.locator(selector).element_handles():
        out.append(tuple([await handle.get_attribute(n) for n in names]))
    return out


async def until(page: Page, probe: Any, want: Any, timeout_s: float = 60.0) -> Any:
    """Poll ``probe()`` (an async read of the page) until it equals ``want``; return the last."""
    got = None

    async def check() -> bool:
        nonlocal got
        got = await probe()
        return bool(got == want)

    await wait_for(check, timeout_s=timeout_s, every_s=0.5)
    return got


async def produce_scenario(names: Names, worker: Worker) -> None:
    """Moods first, and only once the worker holds them the recommendations (the two topics
    are consumed in no guaranteed order: a recommendation first would be a correction)."""
    await produce(
        names,
        names.moods_topic,
        [mood("grace", t, m) for t, m in GRACE_MOODS] + [mood("ada", t, m) for t, m in ADA_MOODS],
    )

    async def moods_held() -> bool:
        for who, rows in (("grace", GRACE_MOODS), ("ada", ADA_MOODS)):
            status, body = worker.get(f"/moods/{who}/")
            if status != 200 or body["moods"] != [
                {"event_time": START + t * S, "mood": m} for t, m in rows
            ]:
                return False
        return True

    assert await wait_for(moods_held, timeout_s=60, every_s=0.3), worker.get("/moods/grace/")
    await produce(
        names,
        names.events_topic,
        [rec("grace", t, r) for t, r in GRACE_RECS] + [rec("ada", t, r) for t, r in ADA_RECS],
    )
    await produce(
        names,
        names.zones_topic,
        [
            (str(z), {"zone_id": z, "pollution_level": p, "event_time": START})
            for z, p in ZONES.items()
        ],
    )
    await produce(
        names,
        names.car_arrivals_topic,
        [
            (
                str(car),
                {"car_id": car, "to_zone_id": z, "fuel_level": 0.5, "event_time": START + i * S},
            )
            for i, (car, z) in enumerate(CARS)
        ],
    )


def expected_zone_cars() -> dict[str, str]:
    where = dict(CARS)  # later arrivals (by event time) win
    return {str(z): str(sum(1 for v in where.values() if v == z)) for z in ZONES}


async def test_page_draws_a_consultant_and_shows_a_live_correction(names, worker_factory, tmp_path):
    w: Worker = worker_factory(names, retention_ms=RETENTION_MS).wait_http_ready()
    await produce_scenario(names, w)
    grace = expected_marks(GRACE_MOODS, GRACE_RECS, "grace")

    async def joined() -> bool:
        status, body = w.get("/joins/grace/")
        return status == 200 and {j["id"]: j["mood"] for j in body["joins"]} == grace

    assert await wait_for(joined, timeout_s=60, every_s=0.5), w.get("/joins/grace/")
    # grace's partition: the greatest event time of every record keyed into it
    clock = max(
        START + t * S
        for who, rows in (("grace", GRACE_MOODS + GRACE_RECS), ("ada", ADA_MOODS + ADA_RECS))
        for t, _ in rows
        if partition_of(who) == partition_of("grace")
    )

    async with timeline_page(tmp_path) as (page, errors):
        page.on(
            "response",
            lambda r: (
                errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and "/api/" not in r.url
                else None
            ),
        )
        await page.goto(w.url + "/timeline/")
        await expect(page).to_have_title(re.compile("etj"))

        # 1. the picker lists both consultants (gathered by /timeline/api/consultants/)
        picker = page.locator("#consultant option")
        await expect(picker).to_have_text(["ada", "grace"], timeout=UI_TIMEOUT_MS)
        await page.select_option("#consultant", "grace")
        assert page.url.endswith("#grace")

        # 2. grace's bands (one per mood, in order) and marks (each with its joined mood)
        bands = lambda: attrs(page, "#bands rect.band", "data-mood", "data-start")  # noqa: E731
        want_bands = [(m, str(START + t * S)) for t, m in GRACE_MOODS]
        assert await until(page, bands, want_bands) == want_bands
        marks = lambda: attrs(page, "#marks circle.mark", "data-id", "data-mood")  # noqa: E731
        want_marks = sorted((jid, m or "") for jid, m in grace.items())
        got = await until(page, lambda: _sorted(marks()), want_marks)
        assert got == want_marks
        assert await page.locator("#marks circle.corrected").count() == 0
        for jid, m in grace.items():  # a mark lies inside the band of the mood it joined
            assert await _mark_in_band(page, jid, m), (jid, m)

        # 3. horizon and stream time of grace's partition
        lines = lambda: attrs(page, "#lines line", "class", "data-time")  # noqa: E731
        want_lines = [("horizon", str(clock - RETENTION_MS)), ("stream-time", str(clock))]
        assert await until(page, lines, want_lines) == want_lines

        # 4. zones: cars per zone (the latest arrival of car 102 moved it from 1 to 3)
        zone_rows = lambda: _zone_counts(page)  # noqa: E731
        assert await until(page, zone_rows, expected_zone_cars()) == expected_zone_cars()

        # 5. a late mood while the page is open: kayak@50 and piano@55 are corrected, live
        after = expected_marks(GRACE_MOODS + [LATE_MOOD], GRACE_RECS, "grace")
        changed = sorted(jid for jid in grace if after[jid] != grace[jid])
        assert changed == ["grace-kayak-50", "grace-piano-55"]
        await produce(names, names.moods_topic, [mood("grace", *LATE_MOOD)])
        corrected = lambda: attrs(  # noqa: E731
            page,
            "#marks circle.corrected",
            "data-id",
            "data-mood",
            "data-previous-mood",
            "data-cause",
            "data-revision",
        )
        want = [(jid, "sad", "tired", "late-dimension", "2") for jid in changed]
        assert await until(page, lambda: _sorted_rows(corrected()), want) == want
        assert await until(page, lambda: _sorted(marks()), sorted(after.items())) == sorted(
            after.items()
        )
        for jid in changed:
            row = page.locator(f'#corrections tr[data-id="{jid}"]')
            await expect(row.locator("td.was")).to_have_text("tired", timeout=UI_TIMEOUT_MS)
            await expect(row.locator("td.now")).to_have_text("sad")
            assert await _mark_in_band(page, jid, "sad")
        await expect(page.locator("#bands rect.band")).to_have_count(5)

        # 6. a zone's cars (D's /zones/{id}/cars/, from the zone's owner): zone 3 has four
        await page.locator('#zones tr[data-zone="3"]').click()
        cars = page.locator("#zone-cars tbody tr")
        await expect(cars).to_have_count(4, timeout=UI_TIMEOUT_MS)
        await expect(cars.locator("td:first-child")).to_have_text(["102", "104", "105", "106"])

        assert not errors, errors
        screenshot = Path(os.environ.get(DOCS_IMAGES_ENV) or tmp_path) / "timeline.png"
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000


async def _sorted(rows: Any) -> list[tuple[str | None, ...]]:
    return sorted((a, b or "") for a, b in await rows)


async def _sorted_rows(rows: Any) -> list[tuple[str | None, ...]]:
    return sorted(await rows)


async def _zone_counts(page: Page) -> dict[str, str]:
    out = {}
    for tr in await page.locator("#zones tbody tr[data-zone]").element_handles():
        cells = await tr.query_selector_all("td")
        out[await tr.get_attribute("data-zone")] = (await cells[-1].inner_text()).strip()
    return out


async def _mark_in_band(page: Page, join_id: str, mood: str | None) -> bool:
    """Whether the mark's centre lies within (band start, band end] of a band of ``mood``."""
    return bool(
        await page.evaluate(
            """([id, mood]) => {
            const c = document.querySelector(`#marks circle.mark[data-id="${id}"]`);
            if (!c) return false;
            const cx = Number(c.getAttribute('cx'));
            return [...document.querySelectorAll('#bands rect.band')].some((b) => {
                const x = Number(b.getAttribute('x')), w = Number(b.getAttribute('width'));
                return b.dataset.mood === mood && cx > x && cx <= x + w + 0.01;
            });
        }""",
            [join_id, mood],
        )
    )


async def test_pickers_and_clock_answer_for_keys_of_another_worker(names, worker_factory):
    """Two workers: either one lists every consultant and zone; the clock comes from the owner."""
    a = worker_factory(names, name="a", retention_ms=RETENTION_MS)
    b = worker_factory(names, name="b", retention_ms=RETENTION_MS)
    await produce_scenario(names, a.wait_http_ready())
    consultants = ["ada", "grace"]

    async def split_and_listed() -> bool:
        for w in (a, b):
            status, body = w.get("/timeline/api/consultants/")
            if status != 200 or body["consultants"] != consultants or len(body["workers"]) != 2:
                return False
            status, body = w.get("/timeline/api/zones/")
            if (
                status != 200
                or {str(z["zone_id"]): str(z["cars"]) for z in body["zones"]}
                != expected_zone_cars()
            ):
                return False
        return True

    assert await wait_for(split_and_listed, timeout_s=90, every_s=0.5), [
        (w.name, w.get("/timeline/api/consultants/"), w.get("/timeline/api/zones/")) for w in (a, b)
    ]
    local = {w.url: w.get("/timeline/api/consultants/local/")[1]["consultants"] for w in (a, b)}
    assert sorted(local[a.url] + local[b.url]) == consultants, local  # each key listed once
    for who in consultants:
        for w in (a, b):
            status, body = w.get(f"/timeline/api/clock/{who}/")
            assert status == 200, body
            assert body["partition"] == partition_of(who)
            owner = a.url if who in local[a.url] else b.url
            assert body["served_by"] == owner
            want = max(
                START + t * S
                for k, rows in (("grace", GRACE_MOODS + GRACE_RECS), ("ada", ADA_MOODS + ADA_RECS))
                for t, _ in rows
                if partition_of(k) == partition_of(who)
            )
            assert body["stream_time"] == want
            assert body["retention_horizon"] == want - RETENTION_MS


def test_page_assets_are_local_and_packaged(tmp_path):
    """No CDN: nothing the page loads names another host; the wheel ships the assets."""
    assets = sorted(p.name for p in STATIC.iterdir())
    assert assets == ["timeline.css", "timeline.html", "timeline.js"]
    for path in STATIC.iterdir():
        text = path.read_text().replace("http://www.w3.org/2000/svg", "")  # SVG namespace id
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), path.name
    html = (STATIC / "timeline.html").read_text()
    for ref in re.findall(r'(?:src|href)="([^"]+)"', html):
        if ref.startswith("data:"):
            continue
        assert ref.startswith("/timeline/static/") and (STATIC / Path(ref).name).exists(), ref

    # what setuptools puts in a wheel or an install: build_py of a copy of the project
    # (offline; a wheel build would need the `wheel` package or build isolation)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import setuptools; setuptools.setup()",
            "-q",
            "build_py",
            "--build-lib",
            "out",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    shipped = {
        p.relative_to(tmp_path / "out").as_posix()
        for p in (tmp_path / "out").rglob("*")
        if p.is_file()
    }
    assert {f"app/web/static/{n}" for n in assets} <= shipped, sorted(shipped)
    assert "app/web/timeline.py" in shipped
