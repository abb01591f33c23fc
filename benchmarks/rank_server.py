"""`leap rank --server URL` against `leap rank` loading the model itself: a launcher's shell call,
timed whole (process start to exit), as a launcher waits for it.

Each run is a fresh `leap` process, as `args=$(leap rank --server URL --format slurm)` is. The
server is a real `leap serve` subprocess on loopback, asking for a bearer token (from
`LEAP_SERVE_TOKEN`, as a launcher would pass it), started once and warm before the first run.
Measured, `--runs` times each (20): `leap rank --server` printing text, the same with `--format
slurm`, and `leap --version` (the interpreter and the entry point alone: the floor); then
`--local-runs` times (3) `leap rank --model` in process on the same model and launch. The server
and the in-process call must print the same ranking, or the run fails. Goal: the server call's
median under 0.5 s. The server shares the cores with the runs; the JSON records the 1-minute load
average before and after.

The model: `--model FOLDER` (a model folder, as `leap serve --model` takes it), or by default the
demo's kind of model `serve_load.py` trains once and caches under data/bench-models/serve-base
(10 simulated days at scale 0.1, the fast profile), and one of the next day's launches.

Run: python benchmarks/rank_server.py [--model FOLDER] [--runs 20] [--local-runs 3] [--json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from serve_load import BASE, build_base, server

LEAP = str(Path(sys.executable).with_name("leap"))
TOKEN = "rank-server-benchmark-token"


def timed(command: list[str], runs: int, env: dict[str, str]) -> tuple[dict, str]:
    """Wall time of ``runs`` runs of ``command``, in ms (min, median, p90, max), and what the
    last one printed; a run that fails stops the benchmark with its error."""
    times, out = [], ""
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        times.append((time.perf_counter() - started) * 1000)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command[:4])} failed: {done.stderr[-2000:]}")
        out = done.stdout
    times.sort()
    p90 = times[min(len(times) - 1, round(0.9 * (len(times) - 1)))]
    figures = {"runs": runs, "min_ms": times[0], "median_ms": statistics.median(times),
               "p90_ms": p90, "max_ms": times[-1]}  # fmt: skip
    return {k: round(v, 1) for k, v in figures.items()}, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="a model folder (default: the cached "
                        "demo-kind model of serve_load.py, trained on first use)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=20, help="runs of each server call")
    parser.add_argument("--local-runs", type=int, default=3, help="runs of the in-process call")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    if args.runs < 1 or args.local_runs < 1:
        parser.error("--runs and --local-runs: at least 1")
    model = Path(args.model) if args.model else build_base(BASE)
    launches = json.loads((BASE / "launches.json").read_text()) if not args.model else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAP_SERVE_")}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        env.update(LEAP_SERVE_TOKEN=TOKEN, MLFLOW_TRACKING_URI=(folder / "mlruns").as_uri(),
                   MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")  # fmt: skip
        job = folder / "job.json"
        if launches:
            first = launches[0]
            job.write_text(json.dumps({**first["job"], "ds": first["launch_date"],
                                       "candidates": first["candidates"]}))  # fmt: skip
        else:  # the repository's example launch, on the given model
            job = Path(__file__).resolve().parents[1] / "examples" / "job.json"
        load_before = os.getloadavg()[0]
        command = [LEAP, "serve", "--model", str(model), "--port", "{port}"]
        with server(command, "/readyz", env, folder / "serve.log") as base:
            remote = [LEAP, "rank", "--server", base, "--job", str(job)]
            results = {}
            results["version"], _ = timed([LEAP, "--version"], args.runs, env)
            results["server_text"], printed = timed(remote, args.runs, env)
            results["server_slurm"], flags = timed([*remote, "--format", "slurm"], args.runs, env)
            local = [LEAP, "rank", "--model", str(model), "--job", str(job)]
            results["in_process_text"], expected = timed(local, args.local_runs, env)
        load_after = os.getloadavg()[0]
    if printed != expected:
        raise SystemExit(f"the server's ranking differs:\n{printed}\nin process:\n{expected}")
    speedup = results["in_process_text"]["median_ms"] / results["server_text"]["median_ms"]
    summary = {**results, "same_output": True, "speedup_median": round(speedup, 1),
               "goal_median_under_ms": 500.0,
               "goal_met": results["server_slurm"]["median_ms"] < 500.0,
               "slurm_flags": flags.strip(), "load_1min_before": round(load_before, 2),
               "load_1min_after": round(load_after, 2), "cpus": os.cpu_count()}  # fmt: skip
    if not args.json:
        for name, figures in results.items():
            print(f"{name:18} median {figures['median_ms']:7.1f} ms  min {figures['min_ms']:7.1f}"
                  f"  p90 {figures['p90_ms']:7.1f}  max {figures['max_ms']:7.1f}  "
                  f"({figures['runs']} runs)")  # fmt: skip
        print(f"server vs in process: {speedup:.1f}x faster (median); same ranking printed")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
