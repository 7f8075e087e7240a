"""``python -m engine --model-path PATH --model-name NAME``: the engine service, no Django.

The command line of ``python -m engine`` is here, as the pooling engine's is in
engine/pooling/__main__.py; the options and entry point it shares with ``manage.py
run_engine`` are engine/service/cli.py's."""

from __future__ import annotations

import argparse
import logging
import sys

from engine.service.cli import add_service_arguments, serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description="Serve a Hugging Face checkpoint from the platform's Redis request stream.",
    )
    parser.add_argument("--model-path", required=True, help="checkpoint directory")
    parser.add_argument("--model-name", required=True, help="served model name (stream name)")
    add_service_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=log_format)
    return serve(args, model_path=args.model_path, model_name=args.model_name)


if __name__ == "__main__":
    sys.exit(main())
