"""``leap serve`` fuzzed over real HTTP: 10,000 malformed requests (bodies, headers, sizes, raw
framing) to a served subprocess; not one answer may be a 5xx, and it must serve a good launch
afterwards. Seeded: a failure names the case, and the same seed makes it again."""

import asyncio
import copy
import json
import random

import httpx
import pytest
from http_model import TOKEN, launch_body, registered_model, serving

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with registered_model(tmp_path_factory.mktemp("http-fuzz")) as model:
        yield model


CASES = 10_000
MAX_BODY = 64 * 1024
RAW_SHARE = 0.1  # cases sent as raw bytes on a socket: framing httpx will not produce
PATHS = ("/v1/rank", "/v1/rank/batch", "/v1/k8s/mutate")
EXTREMES = [None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63), 1e308, -1e308, 1.5, 5e-324,
            "", "x", "0", "1" * 5000, "\u0000", "\ud7ff\ue000", [], {}, [1], {"a": 1}]  # fmt: skip
TEXT = ["{", "}", "[", "]", '"', ":", ",", "null", "true", "1e999", "NaN", "-Infinity",
        "\\u0000", "\\ud800", "\xff", " ", "0" * 400]  # fmt: skip


def _extreme(rng: random.Random):
    return copy.deepcopy(rng.choice(EXTREMES))  # a fresh object: a mutation never aliases one


def _mutated(launch: dict, rng: random.Random) -> dict:
    """A launch with a few of its values (at any depth) replaced, dropped or added."""
    launch = json.loads(json.dumps(launch))
    for _ in range(rng.randint(1, 4)):
        job = launch.get("job")
        target = job if isinstance(job, dict) and rng.random() < 0.6 else launch
        keys = list(target) or ["x"]
        key = rng.choice([*keys, "extra", "budget", "launch_date", "candidates"])
        roll = rng.random()
        if roll < 0.2:
            target.pop(key, None)
        elif roll < 0.3 and isinstance(target.get("candidates"), list):
            target["candidates"] = [rng.choice([*EXTREMES, "A10G", "H100-SXM"])
                                    for _ in range(rng.randint(0, 300))]  # fmt: skip
        else:
            target[key] = _extreme(rng)
    return launch


def _body(served, rng: random.Random) -> tuple[str, bytes]:
    launch = launch_body(served, rng.randrange(len(served["launches"])))
    kind = rng.random()
    if kind < 0.35:
        value = _mutated(launch, rng)
    elif kind < 0.5:
        value = {"launches": [_mutated(launch, rng) for _ in range(rng.randint(0, 40))]}
    elif kind < 0.6:
        value = {"kind": "AdmissionReview", "apiVersion": rng.choice(["admission.k8s.io/v1", 3]),
                 "request": rng.choice([*EXTREMES, {"uid": _extreme(rng)}])}  # fmt: skip
    elif kind < 0.7:
        return rng.choice(PATHS), rng.randbytes(rng.randint(0, 2000))
    elif kind < 0.85:
        text = json.dumps(launch)
        cut = rng.randrange(len(text))
        return rng.choice(PATHS), (text[:cut] + "".join(rng.choices(TEXT, k=3))).encode(
            "utf-8", "surrogatepass"
        )
    elif kind < 0.9:
        depth = rng.choice([10, 1000, 30_000])
        return rng.choice(PATHS), b"[" * depth + b"]" * rng.choice([0, depth])
    else:
        value = _extreme(rng)
    return rng.choice(PATHS), json.dumps(value).encode()


def _headers(rng: random.Random, size: int) -> dict:
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    roll = rng.random()
    if roll < 0.05:
        headers.pop("authorization")
    elif roll < 0.1:
        wrong = ["Bearer", "Bearer " + "x" * rng.randint(1, 6000), "Basic " + TOKEN,
                 "bearer  " + TOKEN + " "]  # fmt: skip
        headers["authorization"] = rng.choice(wrong)
    elif roll < 0.15:
        kinds = ["text/plain", "application/xml", "", "json", "application/json; x=1", "*/*"]
        headers["content-type"] = rng.choice(kinds)
    return headers


def _raw(served, rng: random.Random) -> bytes:
    """A request whose framing lies: a huge or false Content-Length, chunked bodies past the
    limit or broken, a body cut short."""
    path = rng.choice(PATHS)
    body = json.dumps(launch_body(served)).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    head += "Content-Type: application/json\r\n"
    roll = rng.random()
    if roll < 0.25:
        length = rng.choice([10**12, MAX_BODY + 1, len(body) + 100, 2**63])
        return f"{head}Content-Length: {length}\r\n\r\n".encode() + body
    if roll < 0.5:  # chunked, past the limit
        chunk = b"x" * 8192
        chunks = b"".join(b"2000\r\n" + chunk + b"\r\n" for _ in range(MAX_BODY // 8192 + 2))
        return f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + chunks + b"0\r\n\r\n"
    if roll < 0.75:  # chunked, broken
        junk = rng.choice([b"zz\r\n", b"10\r\nabc\r\n", b"-1\r\n", b"ffffffffffffffff\r\n"])
        return f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + junk
    return f"{head}Content-Length: {rng.choice(['abc', '-5', '1 2', ''])}\r\n\r\n".encode() + body


async def _send_raw(port: int, data: bytes) -> int | None:
    """The status of the answer to ``data`` sent whole, or None when the server closed or sent
    nothing within 5 s (a lie about the length it waits out is no 5xx)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        writer.write_eof()
        line = await asyncio.wait_for(reader.readline(), 5)
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (TimeoutError, ConnectionError):
        return None
    finally:
        writer.close()


async def _fuzz(served, base: str, rng: random.Random) -> dict:
    port = int(base.rsplit(":", 1)[1])
    statuses: dict[int | None, int] = {}
    fives: list[str] = []
    gate = asyncio.Semaphore(16)
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:

        async def one(i: int, case: tuple) -> None:
            async with gate:
                if case[0] == "raw":
                    status = await _send_raw(port, case[1])
                else:
                    _, method, path, body, headers = case
                    try:
                        answer = await client.request(method, path, content=body, headers=headers)
                        status = answer.status_code
                    except httpx.HTTPError:
                        status = None
            statuses[status] = statuses.get(status, 0) + 1
            if status is not None and status >= 500:
                fives.append(f"case {i}: {status} for {str(case)[:300]}")

        cases = []
        for _ in range(CASES):
            if rng.random() < RAW_SHARE:
                cases.append(("raw", _raw(served, rng)))
                continue
            path, body = _body(served, rng)
            if rng.random() < 0.03:
                body = body + b" " * (MAX_BODY + rng.randint(1, 5000))  # past the limit
            method = "POST" if rng.random() < 0.97 else rng.choice(["GET", "PUT", "DELETE"])
            if rng.random() < 0.02:
                path = rng.choice(["/", "/v1", "/v1/rank/", "/%00", "/v1/rank?x=1", "/metrics"])
            cases.append(("http", method, path, body, _headers(rng, len(body))))
        await asyncio.gather(*(one(i, case) for i, case in enumerate(cases)))
    return {"statuses": statuses, "fives": fives}


def test_ten_thousand_malformed_requests_get_no_5xx_and_the_server_still_serves(served, tmp_path):
    limit = {"LEAP_SERVE_MAX_BODY_BYTES": str(MAX_BODY)}
    with serving(served, tmp_path, token=TOKEN, env=limit) as (base, process):
        result = asyncio.run(_fuzz(served, base, random.Random(0)))
        good = httpx.post(f"{base}/v1/rank", json=launch_body(served), timeout=30,
                          headers={"authorization": f"Bearer {TOKEN}"})  # fmt: skip
        alive = process.poll() is None
    print(f"answers by status: {sorted(result['statuses'].items(), key=str)}")  # with -s
    assert result["fives"] == [], result["fives"][:20]
    assert sum(result["statuses"].values()) == CASES
    # the cases reached the routes: refused for their body, headers, size, and some ranked
    for status in (200, 400, 401, 413, 415, 422):
        assert result["statuses"].get(status, 0) > 0, result["statuses"]
    assert alive and good.status_code == 200 and good.json()["ranking"]
