"""The views against hostile requests and the bearer token, on real workers.

Raw HTTP over a socket (an HTTP client would clean the request up first): bad percent-escapes,
raw non-ASCII and control bytes, huge ids, very long paths, query strings and headers, unknown
paths and methods, non-HTTP bytes, then hypothesis-made paths under every view, then 10,000
concurrent requests. Every one gets a 4xx (or a 200 where the request is a fair one) — never a
5xx, never silence — and the worker is alive and answering afterwards.

With a token set, the state views answer 401 without it; probes and metrics stay open; a view
asked of a worker that does not own the key is forwarded to the owner with the token.
"""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.commands.sample_traffic import sample_moods_and_events
from tests.faults import send
from tests.harness import Worker

TOKEN = "fuzz-token-0123456789"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
START = 1_790_000_000_000


def raw(port: int, request: bytes, timeout_s: float = 10.0) -> int:
    """Send ``request`` as is; the status code of the answer, 0 if the server said nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else 0


def get(path: bytes, auth: bool = True, extra: bytes = b"", method: bytes = b"GET") -> bytes:
    return (
        method
        + b" "
        + path
        + b" HTTP/1.1\r\nHost: etj\r\n"
        + (AUTH if auth else b"")
        + extra
        + b"Connection: close\r\n\r\n"
    )


#: (request, the statuses it may get)
HOSTILE = [
    (get(b"/moods/%ZZ/"), {404}),  # a bad percent-escape: just a name
    (get(b"/moods/%C0%AF/"), {404}),  # an overlong UTF-8 escape
    (get(b"/moods/%00/"), {404}),
    (get(b"/moods/\xff/"), {400}),  # raw non-ASCII in the request line
    (get(b"/moods/\x00/"), {400}),
    (get(b"/moods/a b/"), {400}),
    (get(b"/cars/" + b"9" * 40 + b"/"), {404}),  # a huge id
    (get(b"/cars/-1/"), {404}),
    (get(b"/zones/%EF%BC%91/cars/"), {404}),  # a full-width digit one
    (get(b"/zones/1/cars/?limit=" + b"9" * 40), {400}),
    (get(b"/zones/1/cars/?limit=%ZZ"), {400}),
    (get(b"/zones/1/cars/?limit=-1"), {400}),
    (get(b"/moods/" + b"a" * 100_000 + b"/"), {400}),  # a very long path
    (get(b"/stats/?q=" + b"x" * 100_000), {400}),  # a very long query string
    (get(b"/stats/?" + b"&".join([b"a=%ZZ"] * 1000)), {200}),
    (get(b"/moods/x/", extra=b"X-Big: " + b"y" * 100_000 + b"\r\n"), {400}),  # a huge header
    (
        get(b"/moods/x/", extra=b"Authorization: Bearer " + b"z" * 100_000 + b"\r\n", auth=False),
        {400},
    ),
    (get(b"/nope/"), {404}),
    (get(b"/timeline/static/../../app/settings.py"), {404}),
    (get(b"/timeline/static/%2e%2e/%2e%2e/app/settings.py"), {404}),
    (get(b"/moods/x/", method=b"POST"), {405}),
    (get(b"/moods/x/", method=b"G\x00T"), {400}),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n", {400}),  # TLS
    (get(b"/moods/x/", auth=False), {401}),
    (get(b"/moods/x/", auth=False, extra=b"Authorization: Bearer wrong\r\n"), {401}),
    (get(b"/nope/", auth=False), {401}),  # unknown paths tell nothing either
]

#: pieces of hostile path segments
PIECES = [
    b"%",
    b"%Z",
    b"%ZZ",
    b"%C0",
    b"%ff",
    b"%2F",
    b"%00",
    b"%25",
    b"a",
    b"\xc3\xa9",
    b"\xff",
    b"..",
    b"/",
    b"?",
    b"#",
    b";",
    b"9" * 30,
    b"-",
    b"\t",
    b"~",
    b"%u0041",
    b"+",
]
SEGMENTS = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join),
    st.binary(max_size=64).filter(lambda b: not set(b) & set(b" \r\n")),
)
VIEWS = [
    b"/moods/%s/",
    b"/joins/%s/",
    b"/cars/%s/",
    b"/zones/%s/cars/",
    b"/zones/1/cars/?limit=%s",
    b"/timeline/api/clock/%s/",
    b"/stats/?%s",
    b"/%s",
    # every join by key (app.web.join_readers): an event-time, a foreign-key, any join
    b"/joins/moods/%s/",
    b"/joins/cars/%s/",
    b"/joins/%s/x/",
    b"/timeline/api/joins/%s/keys/",
]


def worker_with_token(worker_factory, names) -> Worker:
    return worker_factory(names, views_token=TOKEN).wait_ready().wait_http_ready()


def test_hostile_requests_get_4xx_and_the_worker_stays_up(names, worker_factory):
    w = worker_with_token(worker_factory, names)
    for request, allowed in HOSTILE:
        status = raw(w.web_port, request)
        assert status in allowed, (request[:80], status)
    assert w.get("/health/")[0] == 200

    @settings(
        max_examples=300,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(view=st.sampled_from(VIEWS), segment=SEGMENTS)
    def no_5xx_and_always_an_answer(view: bytes, segment: bytes) -> None:
        status = raw(w.web_port, get(view % segment))
        assert 200 <= status < 500, (view % segment, status)

    no_5xx_and_always_an_answer()
    assert w.get("/health/")[0] == 200 and w.proc is not None and w.proc.poll() is None


async def test_ten_thousand_concurrent_requests_all_answered(names, worker_factory):
    w = worker_with_token(worker_factory, names)
    n = 10_000
    statuses: list[int | str] = []

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        auth = {"Authorization": f"Bearer {TOKEN}"} if i % 2 else {}
        try:
            async with session.get(f"{w.url}/cars/{i}/", headers=auth) as resp:
                await resp.read()
                statuses.append(resp.status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            statuses.append(type(exc).__name__)

    began = time.monotonic()
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        await asyncio.gather(*(one(session, i) for i in range(n)))
    took = time.monotonic() - began
    counts = {s: statuses.count(s) for s in set(statuses)}
    print(f"{n} concurrent requests answered in {took:.1f} s: {counts}")
    assert counts == {401: n // 2, 404: n // 2}, counts  # no car exists; half had no token
    assert w.get("/health/")[0] == 200 and w.proc is not None and w.proc.poll() is None


async def test_a_forwarded_view_carries_the_token_and_probes_stay_open(names, worker_factory):
    a = worker_with_token(worker_factory, names)
    b = worker_factory(names, name="b", views_token=TOKEN).wait_ready()
    a.wait_ready(count=2, timeout_s=60)  # a rebalanced when b joined
    records = sample_moods_and_events(
        seed=3,
        count=60,
        start_ms=START,
        late_ratio=0.0,
        consultants=tuple(f"c{i}" for i in range(8)),
    )
    await send(names, records)
    consultants = sorted({v["name"] for k, _, v in records if k == "mood"})
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def fetch(
        session: aiohttp.ClientSession, w: Worker, path: str, auth: bool = True
    ) -> tuple[int, dict]:
        async with session.get(w.url + path, headers=headers if auth else {}) as resp:
            return resp.status, await resp.json(content_type=None)

    forwarded = 0
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        for c in consultants:
            for w in (a, b):
                while True:
                    status, body = await fetch(session, w, f"/moods/{c}/")
                    if status == 200 and body["moods"] or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.5)
                assert status == 200, (c, w.name, status, body)
                forwarded += body["served_by"] != w.url
                assert (await fetch(session, w, f"/moods/{c}/", auth=False))[0] == 401
        assert forwarded >= 2, "no request needed the other worker: forwarding untested"
        for w in (a, b):
            for path in ("/health/", "/ready/", "/metrics"):
                async with session.get(w.url + path) as resp:
                    assert resp.status == 200, (w.name, path)
            status, body = await fetch(session, w, "/timeline/api/consultants/")
            assert status == 200 and all(isinstance(v, int) for v in body["workers"].values()), body
            assert len(body["workers"]) == 2  # both workers answered the gathering, with the token
