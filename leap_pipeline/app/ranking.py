"""What ``leap rank`` reads and prints, whoever ranks: a model loaded in this process
(``rank_in_process``) or a running ``leap serve`` (``rank_from_server``, ``--server URL``).

Both paths read the launch and print the ranking (text, ``--json``, or a scheduler's hand-off)
with the same code here, so a server's answer prints exactly as the in-process one. This module
imports nothing heavy at load: ``cli.main`` runs ``rank_from_server`` before anything imports
polars, MLflow or Dagster, which is what lets ``leap rank --server`` answer in a fraction of a
second (``benchmarks/rank_server.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from leap_serving.decide.results import Ranking

EXAMPLE_JOB = Path(__file__).parents[2] / "examples" / "job.json"


def read_launch(args: argparse.Namespace) -> tuple[Any, Any]:
    """``--job``'s launch and its candidates: ``--candidates`` when given, else the launch's own
    ``candidates`` field (taken out of the launch; [] when it has none)."""
    try:
        job = json.loads(Path(args.job).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--job {args.job}: cannot read a JSON object: {exc}") from None
    listed = job.pop("candidates", None) if isinstance(job, dict) else None
    if args.candidates:
        return job, [c.strip() for c in args.candidates.split(",") if c.strip()]
    return job, listed if listed is not None else []


def handoff_config(args: argparse.Namespace) -> Any:
    """``--handoff-config``'s maps, else the defaults for the simulated fleet's types; None
    without ``--format``. Read before ranking, so a bad file fails first."""
    if not args.format:
        return None
    from leap_serving.handoff.config import HandoffConfig, load_config

    return load_config(args.handoff_config) if args.handoff_config else HandoffConfig()


def rank_from_server(args: argparse.Namespace) -> int:
    """``leap rank --server URL``: the launch ranked by a running ``leap serve`` and printed
    as an in-process ranking is. A server that cannot be reached or answers no ranking exits 1
    naming the URL and why; a bad flag is a ``ValueError`` (exit 2)."""
    from leap_serving.http.client import ServerError, client_token, rank_remote

    for flag, value in (("--model", args.model), ("--data", args.data)):
        if value:  # the server's own model answers: saying another one would mislead
            raise ValueError(f"{flag} {value!r}: not used with --server, whose model answers")
    job, candidates = read_launch(args)
    handoff = handoff_config(args)
    try:
        result = rank_remote(
            args.server,
            job,
            candidates,
            token=client_token(args.token_file),
            cacert=args.cacert or None,
        )
    except ServerError as exc:
        print(f"leap: error: {exc}", file=sys.stderr)
        return 1
    return show(result, args, job, handoff)


def rank_in_process(args: argparse.Namespace) -> int:
    """``leap rank`` without ``--server``: the launch ranked by a model loaded in this process;
    a bad job still exits 0, with an empty ranking and a reason. Reached from ``cli``'s quick
    parser as ``--server`` is, with nothing imported but the Ranker: the warehouse's and the
    simulator's imports cost an in-process ranking 0.3 s of its 3 (``benchmarks/model_load.py``).
    """
    import logging

    from leap_pipeline.app.registry_choice import from_registry, registry_uri
    from leap_pipeline.settings import DATA_ENV, environment, set_environment
    from leap_serving.decide.ranker import Ranker

    for flag, value in (("--token-file", args.token_file), ("--cacert", args.cacert)):
        if value:  # no request is made: a flag that does nothing would mislead
            raise ValueError(f"{flag} {value!r}: only with --server URL")
    logging.getLogger("leap_serving").setLevel(logging.ERROR)  # the reason is printed below
    job, candidates = read_launch(args)
    where = environment({DATA_ENV: args.data}) if args.data else environment()
    # the install's store, unless MLFLOW_TRACKING_URI names one (a server's download would draw
    # a progress bar on stderr)
    uri = registry_uri(where) if from_registry(args.model) else where.tracking_uri
    set_environment(
        overwrite=False, MLFLOW_TRACKING_URI=uri, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"
    )
    handoff = handoff_config(args)  # fails first
    ranker = Ranker(args.model or None, check_interval_s=float("inf"), wait=True)
    return show(ranker.rank(job, candidates), args, job, handoff)


def show(result: Ranking, args: argparse.Namespace, job: Any, handoff: Any) -> int:
    """Print ``result`` as ``args`` asks: a hand-off (``--format``), one JSON object, or text.
    With ``--format`` an empty ranking is a ``HandoffError`` (a ``ValueError``: exit 2 with
    the reason), unless ``--no-fail-empty``."""
    if args.format:
        from leap_serving.handoff.formats import guessed_names, render, unmapped

        if not result.ranking and not args.fail_empty:
            print(
                f"leap: no ranking ({result.reason}): nothing printed (--no-fail-empty)",
                file=sys.stderr,
            )
            return 0
        # the host sizes the ranking priced each type on: what a launch taking whole hosts
        # asks for, from the answer itself, so a server's ranking hands on as a local one does
        host_sizes = {
            c.hardware_type: c.devices_per_host
            for c in (*result.ranking, *result.removed)
            if c.devices_per_host is not None
        }
        text = render(args.format, result, handoff, job, host_sizes)
        left_out = unmapped(args.format, result, handoff)
        if left_out:  # ranked, but the scheduler cannot be told: the user must hear of it
            print(
                f"leap: {args.format}: left out, no label value in the hand-off config's "
                f"kubernetes.products: {', '.join(left_out)}",
                file=sys.stderr,
            )
        guessed = guessed_names(args.format, result, handoff)
        if guessed:  # handed on under a guessed name the scheduler may not know
            key = "skypilot.accelerators" if args.format == "skypilot" else "slurm.features"
            named = ", ".join(f"{t} as {n!r}" for t, n in guessed.items())
            print(
                f"leap: {args.format}: no entry in the hand-off config's {key}, handed on "
                f"under a guessed name: {named}",
                file=sys.stderr,
            )
        print(text.rstrip("\n"))
        return 0
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    print(f"model version {result.model_version}")
    if result.reason:
        print(f"no ranking: {result.reason}")
    if result.interval_level is not None:
        print(
            f"intervals: {result.interval_level:.0%} (conformal, calibrated on the selection day)"
        )
    for c in result.ranking:
        history = "history" if c.history_found else "cold start"
        interval = (
            f" [{c.throughput_low:,.0f} - {c.throughput_high:,.0f}]"
            if c.throughput_low is not None
            else ""
        )
        print(
            f"{c.rank:>3}. {c.hardware_type:14} {c.predicted_throughput:>14,.0f} samples/s"
            f"{interval} {c.cost_per_hour:>9,.2f} $/h {c.throughput_per_cost:>16,.0f} "
            f"samples/$ bin {c.bin:>2} ({c.bin_probability:.2f}) {history}"
        )
    for c in result.removed:
        print(f"  - {c.hardware_type}: {c.removed_reason}")
    if result.worth_a_trial is not None:
        print(f"worth one trial run: {result.worth_a_trial['reason']}")
    if result.ignored_fields:
        print(f"ignored fields: {', '.join(result.ignored_fields)}")
    return 0
