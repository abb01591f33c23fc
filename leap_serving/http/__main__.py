"""``python -m leap_serving.http``: ``leap serve`` on a host with only ``leap_serving``, set by
the same ``LEAP_SERVE_*`` and ``LEAP_MODEL_URI`` variables (``config``)."""

from __future__ import annotations

import argparse
import json
import sys

from .config import add_listener_flags, config_from_environment, listener_settings
from .openapi import document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leap_serving.http", description="the Ranker over HTTP (docs/serving.md)"
    )
    parser.add_argument("--host", default=None, help="default $LEAP_SERVE_HOST, else 127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=None, help="default $LEAP_SERVE_PORT, else 8765"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="models:/name@alias or a model folder "
        "(default $LEAP_MODEL_URI, else the production alias)",
    )
    parser.add_argument(
        "--check-interval",
        type=float,
        default=15.0,
        help="seconds between checks of the model pointer, made in the background",
    )
    add_listener_flags(parser)
    parser.add_argument("--openapi", action="store_true", help="print the OpenAPI document")
    args = parser.parse_args(argv)
    if args.openapi:
        print(json.dumps(document(), indent=2, sort_keys=True))
        return 0
    try:
        config = config_from_environment(host=args.host, port=args.port, **listener_settings(args))
        from .server import serve

        serve(config, args.model, check_interval_s=args.check_interval)
    except ValueError as exc:
        print(f"python -m leap_serving.http: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
