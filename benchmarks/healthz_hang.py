"""`/healthz` under Prometheus scrapes while the registry hangs: over real HTTP, open loop.

A real `mlflow server` holds the registry (the demo-sized model of `serve_load.py`, registered
in a throwaway store). Between it and `leap serve` sits a proxy that forwards every request,
or, once the second phase starts, holds each one `--hang-s` seconds (10) before forwarding it:
a registry that hangs, not one that refuses. `leap serve --model models:/...@production` reads
the registry through the proxy. Then, for each phase (`--phase-s`, 80 s: longer than the
server's 60 s model check and its 60 s `last_night` cache, so both go to the registry in it):

- `GET /healthz` at `--rate` per second (50), sent on a fixed schedule whatever came back,
  each latency counted from its scheduled send time (a late answer counts against the server);
- `GET /metrics` every `--scrape-s` seconds (1), as a Prometheus scrape.

It prints, per phase, the `/healthz` and `/metrics` latencies (p50, p99, max), their errors,
and how many registry requests the proxy forwarded and held. Issue 68's goal: `/healthz` under
50 ms at p99 during scrapes with a registry that hangs 10 s.

Run: python benchmarks/healthz_hang.py [--phase-s 80] [--rate 50] [--hang-s 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from serve_load import BASE, BIN, build_base, register, server

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class HangingProxy(ThreadingHTTPServer):
    """Forwards each request to ``upstream``; while ``hang_s`` is set, holds it that long
    first. Counts what it forwarded and what it held."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = urllib.parse.urlsplit(upstream)
        self.hang_s = 0.0
        self.forwarded = 0
        self.held = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: HangingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        proxy = self.server
        if proxy.hang_s:
            proxy.held += 1
            time.sleep(proxy.hang_s)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(
            proxy.upstream.hostname, proxy.upstream.port, timeout=60
        )
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        proxy.forwarded += 1
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _forward


async def phase(base: str, seconds: float, rate: float, scrape_s: float) -> dict:
    """``/healthz`` at ``rate`` and ``/metrics`` every ``scrape_s``, open loop, for
    ``seconds``: the latencies of each (ms, from the scheduled send) and the errors."""
    import httpx

    latencies: dict[str, list[float]] = {"/healthz": [], "/metrics": []}
    errors: dict[str, int] = {"/healthz": 0, "/metrics": 0}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:

        async def one(path: str, due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            try:
                answer = await client.get(path)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies[path].append((time.perf_counter() - due) * 1000)
            else:
                errors[path] += 1

        start = time.perf_counter() + 0.2
        tasks = [one("/healthz", start + i / rate) for i in range(int(seconds * rate))]
        tasks += [one("/metrics", start + i * scrape_s) for i in range(int(seconds / scrape_s))]
        await asyncio.gather(*tasks)

    def figures(values: list[float]) -> dict:
        if not values:
            return {"n": 0}
        q = np.percentile(values, [50, 99])
        return {
            "n": len(values),
            "p50_ms": round(float(q[0]), 1),
            "p99_ms": round(float(q[1]), 1),
            "max_ms": round(max(values), 1),
        }

    return {path: {**figures(values), "errors": errors[path]} for path, values in latencies.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=80.0, help="seconds of each phase")
    parser.add_argument("--rate", type=float, default=50.0, help="/healthz requests a second")
    parser.add_argument("--scrape-s", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--hang-s", type=float, default=10.0, help="the registry's hang")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    BASE.mkdir(parents=True, exist_ok=True)
    folder = build_base(BASE)
    work = Path(tempfile.mkdtemp(prefix="healthz-hang-"))
    try:
        uri, tracking = register(folder, work / "mlflow")
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "LEAP_SERVE_TOKEN": "",
            "OMP_NUM_THREADS": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "LEAP_DATA"):
            env.pop(name, None)
        mlflow_server = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--backend-store-uri",
            tracking,
            "--workers",
            "1",
        ]
        with server(mlflow_server, "/health", env, work / "mlflow.log") as registry_url:
            proxy = HangingProxy(registry_url)
            threading.Thread(target=proxy.serve_forever, daemon=True).start()
            serve_env = {**env, "MLFLOW_TRACKING_URI": proxy.uri}
            leap = [str(BIN / "leap"), "serve", "--model", uri, "--port", "{port}"]
            with server(leap, "/readyz", serve_env, work / "leap.log") as base:
                report: dict = {
                    "phase_s": args.phase_s,
                    "rate": args.rate,
                    "scrape_s": args.scrape_s,
                    "hang_s": args.hang_s,
                }
                for name, hang in (("answering", 0.0), ("hanging", args.hang_s)):
                    proxy.hang_s, proxy.forwarded, proxy.held = hang, 0, 0
                    figures = asyncio.run(phase(base, args.phase_s, args.rate, args.scrape_s))
                    figures["registry_requests"] = {
                        "forwarded": proxy.forwarded,
                        "held": proxy.held,
                    }
                    report[name] = figures
                    if not args.json:
                        print(f"{name}: {json.dumps(figures)}", flush=True)
                proxy.hang_s = 0.0
                proxy.shutdown()
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(work)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
