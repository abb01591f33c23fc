"""`leap serve` under a real HTTP load, open loop, beside `mlflow models serve` of the same version.

A closed loop of N clients measures the queue it builds, not the service, so this is an open
loop: an async httpx client sends on a fixed schedule, whatever came back, and each latency runs
from the request's scheduled send time to its answer (a client that falls behind counts against
the service, as a launcher's wait would). Measured, each server in its own process:

- `leap serve` at a fixed 200 rankings/s for `--duration` s (60): p50, p99 (goal: p99 <= 10 ms);
- the highest rate whose p99 stays under 50 ms, single launches and batches of `--batch` (goal:
  1,000 rankings/s batched), searched upward by factors of 1.5 for `--search-duration` s a step;
- the same for `mlflow models serve` of the same registry version (`/invocations`: one row per
  candidate, throughputs only: no ranking, prices or reasons);
- the framework choice: a bare Starlette route and a bare FastAPI route doing the same ranking
  once, at the fixed rate for `--compare-duration` s each.

The model: `--model models:/name@alias` (with `--data` or MLFLOW_TRACKING_URI for its store), or
by default the demo's kind of model trained once and cached under data/bench-models/serve-base
(10 simulated days at the demo's scale 0.1, the fast profile), registered in a throwaway store.
The load generator shares the 2 cores with the server: its own cost is in every figure.

`--app starlette,fastapi` measures instead `leap serve`'s app as built by each (the Starlette
`create_app`, the FastAPI prototype `benchmarks/fastapi_app.py`), through one launcher,
alternating for `--repeat` rounds (docs/decisions.md).

Run: python benchmarks/serve_load.py [--model URI] [--duration 60] [--search-duration 10]
     [--search-factor 1.5] [--batch 50] [--no-mlflow] [--app starlette,fastapi --repeat 3]
     [--json]
"""

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
BASE = PROJECT / "data" / "bench-models" / "serve-base"
BIN = Path(sys.executable).parent
FIRST, DAYS, SCALE = dt.date(2026, 1, 1), 10, 0.1
P99_LIMIT_MS = 50.0
MAX_IN_FLIGHT = 256  # unanswered requests the client holds open; past it, a step has failed


def build_base(folder: Path) -> Path:
    """The demo's kind of model: 10 days at scale 0.1, one night with the fast profile; and the
    next day's launches (``launches.json``). Cached: trained once."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling.night_store import save_trained
    from leap_pipeline.modeling.selection import fit_models
    from leap_pipeline.orchestration.definitions import materialize_days
    from leap_serving.launch.features import LAUNCH_COLUMNS

    if (folder / "launches.json").exists():
        return folder / "models" / "cascade"
    night = FIRST + dt.timedelta(days=DAYS - 1)
    warehouse = folder / "leap.duckdb"
    materialize_days(FIRST, night + dt.timedelta(days=1), source=f"simulator:seed=0,scale={SCALE}",
                     warehouse=str(warehouse), log_level="WARNING")  # fmt: skip
    with open_warehouse(warehouse, read_only=True) as wh:
        models = fit_models(wh.read("feature_table", FIRST, night - dt.timedelta(days=1)), night)
        snapshot = wh.read("history_snapshot", night, night).drop("ds")
        specs = wh.read("hardware_specs", night, night).drop("ds")
        tomorrow = wh.read("job_attempts", night + dt.timedelta(days=1), night + dt.timedelta(1))
    save_trained(models, folder / "models", snapshot, specs, "fast")
    launches = []
    for row in tomorrow.unique("family", keep="first").head(400).iter_rows(named=True):
        job = {k: row[k] for k in LAUNCH_COLUMNS if k not in ("hardware_type", "ds")}
        launches.append({"job": job, "candidates": list(row["candidate_hardware"]),
                         "launch_date": (night + dt.timedelta(days=1)).isoformat()})  # fmt: skip
    (folder / "launches.json").write_text(json.dumps(launches, default=str))
    return folder / "models" / "cascade"


def register(model_folder: Path, store: Path) -> tuple[str, str]:
    """The cached model as version 1 of a throwaway registry, behind the production alias."""
    from leap_pipeline.modeling import registry
    from leap_pipeline.settings import MODEL_NAME_ENV

    os.environ[MODEL_NAME_ENV] = "leap-serve-bench"
    tracking = registry.configure_tracking(store)
    night = FIRST + dt.timedelta(days=DAYS - 1)
    _, version = registry.log_candidate(
        artifact_folder=model_folder, day=night, window=(FIRST, night), run_kind="test",
        params={}, metrics={}, files=[],
    )  # fmt: skip
    registry.promote(version, reason="benchmark", actor="serve_load")
    return registry.model_uri(), tracking


# -- servers -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Base(str):
    """A server's base URL, carrying its process id (``pid``) for ``server_cpu_s``."""

    pid: int


def server_cpu_s(pid: int | None) -> float:
    """CPU seconds a server process and its children have used (0 without a pid)."""
    import psutil

    if pid is None:
        return 0.0
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


@contextlib.contextmanager
def server(command: list[str], ready_path: str, env: dict, log: Path):
    """A server subprocess, up once ``ready_path`` answers 200; stopped on leaving. Yields its
    base URL (a ``Base``)."""
    import httpx

    port = free_port()
    args = [a.replace("{port}", str(port)) for a in command]
    with log.open("w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=log.parent)  # fmt: skip
        base = Base(f"http://127.0.0.1:{port}")
        base.pid = proc.pid
        try:
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args[:3]} did not start: {log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + ready_path, timeout=2).status_code == 200:
                        break
                time.sleep(0.3)
            yield base
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(15)


def framework_server(framework: str, model_uri: str, port: int) -> None:
    """A bare route doing the same ranking once, in Starlette or FastAPI: the framework's own
    cost, without leap serve's guard, metrics or checks."""
    import uvicorn
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    from leap_serving import Ranker

    ranker = Ranker(model_uri, check_interval_s=float("inf"), wait=True)

    def rank(body: dict) -> dict:
        date = dt.date.fromisoformat(body["launch_date"])
        return ranker.rank(body["job"], body["candidates"], launch_date=date).to_dict()

    if framework == "fastapi":
        from fastapi import Body, FastAPI

        app = FastAPI()

        @app.post("/v1/rank")
        async def fastapi_rank(body: dict = Body(...)):  # noqa: B008 (FastAPI's idiom)
            return JSONResponse(await run_in_threadpool(rank, body))

        @app.get("/readyz")
        async def fastapi_ready():
            return {"ready": True}
    else:
        from starlette.applications import Starlette
        from starlette.routing import Route

        async def starlette_rank(request):
            return JSONResponse(await run_in_threadpool(rank, await request.json()))

        async def starlette_ready(request):
            return JSONResponse({"ready": True})

        app = Starlette(routes=[Route("/v1/rank", starlette_rank, methods=["POST"]),
                                Route("/readyz", starlette_ready)])  # fmt: skip
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


APPS = ("starlette", "fastapi")


def app_server(name: str, model_uri: str, port: int) -> None:
    """``leap serve``'s own ``serve`` over the app ``name`` builds: ``starlette`` is
    ``app.create_app`` (what ``leap serve`` runs), ``fastapi`` the prototype
    ``fastapi_app.create_fastapi_app``. One launcher for both, so only the app differs."""
    from leap_serving.http import server
    from leap_serving.http.config import config_from_environment

    if name == "fastapi":
        # beside this script, not in leap_serving: a prototype the model must not ship and pin
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from fastapi_app import create_fastapi_app

        server.create_app = create_fastapi_app
    server.serve(config_from_environment(port=port), model_uri)


def wait_quiet(limit: float, poll_s: float = 10.0) -> None:
    """Wait until the 1-minute load average is under ``limit`` (0: no wait): a host whose other
    work comes and goes (a test suite) is measured in its quiet spells."""
    while limit > 0 and (load := os.getloadavg()[0]) >= limit:
        print(json.dumps({"waiting": "load", "load": round(load, 2)}), file=sys.stderr)
        time.sleep(poll_s)


def compare_apps(uri: str, env: dict, launches: list[dict], work: Path, args) -> dict:
    """The apps of ``args.app`` side by side, ``args.repeat`` rounds: each round starts one
    server of each (an idle one costs nothing measurable) and measures them in adjacent windows,
    the order swapped every window: 60 s at the fixed rate each, then each step of the searches
    for both before the next step. On a host whose other work comes and goes, a disturbance
    then falls on both apps' windows alike instead of on one app's whole run."""
    names = [n.strip() for n in args.app.split(",") if n.strip()]
    if unknown := set(names) - set(APPS):
        raise SystemExit(f"--app: {', '.join(sorted(unknown))} is not one of {', '.join(APPS)}")
    single, batched = leap_bodies(launches, args.batch)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for round_ in range(args.repeat):
        wait_quiet(args.quiet_load)
        load_before = round(os.getloadavg()[0], 2)
        with contextlib.ExitStack() as stack:
            bases = {}
            for name in names:
                command = [sys.executable, __file__, "--serve-app", name, "--model", uri,
                           "--port", "{port}"]  # fmt: skip
                log = work / f"{name}-{round_}.log"
                bases[name] = stack.enter_context(server(command, "/readyz", env, log))
            order = names if round_ % 2 == 0 else names[::-1]
            results = {}
            for name in order:
                base = bases[name]
                results[name] = asyncio.run(open_loop(base + "/v1/rank", single, args.rate,
                                                      args.duration, base.pid))  # fmt: skip
            one = search_side_by_side({n: bases[n] + "/v1/rank" for n in order}, single, 1,
                                      50.0, args, {n: bases[n].pid for n in order})  # fmt: skip
            many = search_side_by_side({n: bases[n] + "/v1/rank/batch" for n in order}, batched,
                                       args.batch, 250.0, args,
                                       {n: bases[n].pid for n in order})  # fmt: skip
        load_after = round(os.getloadavg()[0], 2)
        for name in names:
            result = {**results[name], "single_rankings_per_s": one[name]["rankings_per_s"],
                      "batched_rankings_per_s": many[name]["rankings_per_s"],
                      "batched_server_cpu_ms_per_ranking": round(
                          many[name]["steps"][0]["server_cpu_ms"] / args.batch, 4),
                      "load_before": load_before, "load": load_after,
                      "search": {"single": one[name]["steps"],
                                 "batched": many[name]["steps"]}}  # fmt: skip
            runs[name].append(result)
            print(json.dumps({"app": name, "round": round_, **{k: v for k, v in result.items()
                              if k != "search"}}), file=sys.stderr)  # fmt: skip
    keys = ("p50_ms", "p99_ms", "server_cpu_ms", "single_rankings_per_s", "batched_rankings_per_s",
            "batched_server_cpu_ms_per_ranking", "load_before", "load")  # fmt: skip
    summary = {n: {k: [r.get(k) for r in rs] for k in keys} for n, rs in runs.items()}
    return {"runs": runs, "summary": summary}


def search_side_by_side(urls: dict[str, str], bodies: list[bytes], per_request: int,
                        start: float, args, pids: dict[str, int]) -> dict:  # fmt: skip
    """``search`` for several servers at once: each step's rate is tried on every server still
    passing (the order swapped each step) before the next; a server leaves at its first failed
    step. A 2 s pause after each window lets a server that fell behind drain its queue."""
    found = {n: {"rankings_per_s": None, "steps": []} for n in urls}
    live, rate = list(urls), start
    for step in range(24):
        if not live:
            break
        for name in list(live) if step % 2 == 0 else live[::-1]:
            result = asyncio.run(open_loop(urls[name], bodies, rate / per_request,
                                           args.search_duration, pids[name]))  # fmt: skip
            result["rankings_per_s"] = round(rate)
            found[name]["steps"].append(result)
            time.sleep(2.0)
            if result["p99_ms"] is None or result["p99_ms"] >= P99_LIMIT_MS or result["errors"]:
                live.remove(name)
            else:
                found[name]["rankings_per_s"] = round(rate)
        rate *= args.search_factor
    return found


# -- the load ------------------------------------------------------------------------------------


async def open_loop(url: str, bodies: list[bytes], rate: float, duration: float,
                    pid: int | None = None) -> dict:  # fmt: skip
    """Send ``rate`` requests a second for ``duration`` s on a fixed schedule; latency from each
    scheduled send time to its answer. Non-200 answers and failures count as errors; a request
    due while ``MAX_IN_FLIGHT`` are unanswered is not sent and counts as an error of infinite
    latency (a server that far behind has failed the step, and queueing more in the client
    would only slow the client: httpx's pool wakes every waiter on each free connection).

    The client is the instrument, so its own pauses must not count as the service's: this process
    holds mlflow and the pipeline, and one full collection of its heap stalled the client 284-379
    ms (measured with ``gc.callbacks``), delaying every send due meanwhile, once or twice a minute
    at 200/s. The collector is therefore off for the measured window (what is allocated there is
    freed by reference counting; cycles wait until it is back on), and ``client_lag_p99_ms``, how
    late each request's task started against its schedule, says whether the client kept up (what
    httpx does after that still counts as the service's). With the server's ``pid``,
    ``server_cpu_ms`` is the CPU time it used a request over the window: the work each answer
    costs, far steadier from run to run than a latency on cores the client shares."""
    import httpx

    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    lags: list[float] = []
    errors = in_flight = 0
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:

        async def one(body: bytes, scheduled: float) -> None:
            nonlocal errors, in_flight
            in_flight += 1
            lags.append(loop.time() - scheduled)
            try:
                answer = await client.post(url, content=body, headers=headers)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            finally:
                in_flight -= 1
            latencies.append(loop.time() - scheduled)
            errors += not ok

        for body in bodies[:50]:  # warm the connections and the server
            await one(body, loop.time())
        latencies.clear()
        lags.clear()
        errors = 0
        n = max(1, int(rate * duration))
        tasks = []
        collecting = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
        cpu = server_cpu_s(pid)
        try:
            start = loop.time() + 0.1
            for i in range(n):
                scheduled = start + i / rate
                if (delay := scheduled - loop.time()) > 0:
                    await asyncio.sleep(delay)
                if in_flight >= MAX_IN_FLIGHT:
                    latencies.append(float("inf"))
                    errors += 1
                    continue
                tasks.append(asyncio.create_task(one(bodies[i % len(bodies)], scheduled)))
            await asyncio.gather(*tasks)
            cpu = server_cpu_s(pid) - cpu
        finally:
            gc.unfreeze()
            if collecting:
                gc.enable()
    ms = np.array(latencies) * 1000.0
    result = {"rate": round(rate, 1), "requests": n, "errors": errors}
    for q in (50, 99):
        value = float(np.percentile(ms, q, method="higher"))
        result[f"p{q}_ms"] = round(value, 2) if np.isfinite(value) else None
    if lags:
        lag = float(np.percentile(lags, 99, method="higher"))
        result["client_lag_p99_ms"] = round(lag * 1000.0, 2)
    if pid is not None:
        result["server_cpu_ms"] = round(cpu * 1000.0 / n, 3)
    print(json.dumps({"url": url, **result}), file=sys.stderr)  # progress
    return result


def search(url: str, bodies: list[bytes], per_request: int, start: float, duration: float,
           factor: float = 1.5, pid: int | None = None, steps: int = 24) -> dict:  # fmt: skip
    """The highest rankings/s (``per_request`` rankings a request) whose p99 stays under 50 ms
    with no errors, going up by ``factor`` from ``start`` until a step fails."""
    best, tried, rate = None, [], start
    for _ in range(steps):
        result = asyncio.run(open_loop(url, bodies, rate / per_request, duration, pid))
        result["rankings_per_s"] = round(rate)
        tried.append(result)
        if result["p99_ms"] is None or result["p99_ms"] >= P99_LIMIT_MS or result["errors"]:
            break
        best, rate = round(rate), rate * factor
    return {"rankings_per_s": best, "steps": tried}


# -- bodies --------------------------------------------------------------------------------------


def leap_bodies(launches: list[dict], batch: int) -> tuple[list[bytes], list[bytes]]:
    single = [json.dumps(x).encode() for x in launches]
    batched = [json.dumps({"launches": [launches[(i + k) % len(launches)] for k in range(batch)]})
               .encode() for i in range(0, len(launches), batch)]  # fmt: skip
    return single, batched


def mlflow_bodies(launches: list[dict], batch: int) -> tuple[list[bytes], list[bytes]]:
    """The same launches as ``/invocations`` takes them: one contract row per candidate."""
    from leap_serving.launch.features import LAUNCH_COLUMNS

    def rows(launch: dict) -> list[dict]:
        base = {**launch["job"], "ds": launch["launch_date"]}
        return [{c: {**base, "hardware_type": t}.get(c) for c in LAUNCH_COLUMNS}
                for t in launch["candidates"]]  # fmt: skip

    def body(group: list[dict]) -> bytes:
        return json.dumps({"dataframe_records": [r for x in group for r in rows(x)]}).encode()

    single = [body([x]) for x in launches]
    batched = [body([launches[(i + k) % len(launches)] for k in range(batch)])
               for i in range(0, len(launches), batch)]  # fmt: skip
    return single, batched


def measure(base: str, path: str, bodies: tuple[list[bytes], list[bytes]], args) -> dict:
    """p50 and p99 at the fixed rate, then the highest rates single and batched; with the
    server's CPU a ranking at the fixed rate, and batched at the search's first step."""
    single, batched = bodies
    pid = getattr(base, "pid", None)
    fixed = asyncio.run(open_loop(base + path[0], single, args.rate, args.duration, pid))
    one = search(base + path[0], single, 1, 50.0, args.search_duration, args.search_factor, pid)
    many = search(base + path[1], batched, args.batch, 250.0, args.search_duration,
                  args.search_factor, pid)  # fmt: skip
    result = {**fixed, "single_rankings_per_s": one["rankings_per_s"],
              "batched_rankings_per_s": many["rankings_per_s"],
              "search": {"single": one["steps"], "batched": many["steps"]}}  # fmt: skip
    if "server_cpu_ms" in many["steps"][0]:
        cpu = many["steps"][0]["server_cpu_ms"] / args.batch
        result["batched_server_cpu_ms_per_ranking"] = round(cpu, 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="models:/name@alias (default: the cached "
                        "demo-sized model, registered in a throwaway store)")  # fmt: skip
    parser.add_argument("--data", default="", help="the MLflow store of --model: a data folder "
                        "(default: MLFLOW_TRACKING_URI, else $LEAP_DATA)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=200.0, help="the fixed rate, rankings/s")
    parser.add_argument("--duration", type=float, default=60.0, help="s at the fixed rate")
    parser.add_argument("--search-duration", type=float, default=10.0, help="s a search step")
    parser.add_argument("--compare-duration", type=float, default=20.0,
                        help="s for each framework at the fixed rate (0: skip)")  # fmt: skip
    parser.add_argument("--batch", type=int, default=50, help="launches a batch request")
    parser.add_argument("--no-mlflow", action="store_true", help="skip mlflow models serve")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--search-factor", type=float, default=1.5,
                        help="each search step's rate over the last's")  # fmt: skip
    parser.add_argument(
        "--app",
        default="",
        help="instead of leap serve beside mlflow: "
        "leap serve's app built by each of these, comma-separated (starlette: "
        "app.create_app; fastapi: the prototype fastapi_app), alternating",
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds of --app")
    parser.add_argument("--quiet-load", type=float, default=0.0, help="with --app: wait before "
                        "each run until the 1-minute load average is under this")  # fmt: skip
    parser.add_argument("--serve-app", choices=APPS, help=argparse.SUPPRESS)
    parser.add_argument("--framework-server", choices=("starlette", "fastapi"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.framework_server:
        return framework_server(args.framework_server, args.model, args.port)
    if args.serve_app:
        return app_server(args.serve_app, args.model, args.port)

    BASE.mkdir(parents=True, exist_ok=True)
    folder = build_base(BASE)
    launches = json.loads((BASE / "launches.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    try:
        if args.model:
            from leap_pipeline.settings import environment

            data = environment({"LEAP_DATA": args.data}) if args.data else environment()
            os.environ.setdefault("MLFLOW_TRACKING_URI", data.tracking_uri)
            uri, tracking = args.model, os.environ["MLFLOW_TRACKING_URI"]
        else:
            uri, tracking = register(folder, work / "mlflow")
        env = {**os.environ, "MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": tracking,
               "MLFLOW_DISABLE_TELEMETRY": "true", "LEAP_SERVE_TOKEN": "", "OMP_NUM_THREADS": "1",
               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
        report: dict = {"model": uri if args.model else f"demo-sized ({folder})",
                        "rate": args.rate, "duration_s": args.duration, "batch": args.batch,
                        "load_before": round(os.getloadavg()[0], 2)}  # fmt: skip
        if args.app:
            report.update(compare_apps(uri, env, launches, work, args))
            report["load_after"] = round(os.getloadavg()[0], 2)
            if not args.json:
                for name, figures in report["summary"].items():
                    print(f"{name}: {json.dumps(figures)}")
            print(json.dumps(report))
            return
        leap = [str(BIN / "leap"), "serve", "--model", uri, "--port", "{port}"]
        with server(leap, "/readyz", env, work / "leap.log") as base:
            report.update(measure(base, ("/v1/rank", "/v1/rank/batch"),
                                  leap_bodies(launches, args.batch), args))  # fmt: skip
        if not args.no_mlflow:
            mlflow = [str(BIN / "mlflow"), "models", "serve", "-m", uri, "--env-manager",
                      "local", "-p", "{port}", "-w", "1"]  # fmt: skip
            with server(mlflow, "/ping", env, work / "mlflow.log") as base:
                result = measure(base, ("/invocations", "/invocations"),
                                 mlflow_bodies(launches, args.batch), args)  # fmt: skip
            report["mlflow"] = result
        if args.compare_duration > 0:
            report["frameworks"] = {}
            for name in ("starlette", "fastapi"):
                bare = [sys.executable, __file__, "--framework-server", name, "--model", uri,
                        "--port", "{port}"]  # fmt: skip
                with server(bare, "/readyz", env, work / f"{name}.log") as base:
                    report["frameworks"][name] = asyncio.run(open_loop(
                        base + "/v1/rank", leap_bodies(launches, 1)[0], args.rate,
                        args.compare_duration))  # fmt: skip
        report["load_after"] = round(os.getloadavg()[0], 2)  # 1-min load average: the noise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.json:
        for key, value in report.items():
            if key != "search" and not isinstance(value, dict):
                print(f"{key}: {value}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
