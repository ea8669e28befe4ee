"""The ``ayo`` command line: ``serve``, ``models prepare``, ``compare``, ``cluster``, ``emulate``.

Subcommands import their implementation lazily so ``ayo --help`` is instant.
``compare`` lives in the installed ``ayo_bench`` package (it drives the example
apps, which use the adapters); the core only looks its entry point up by name
when asked, so ``ayo_core`` itself imports no adapter, framework or demo code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# The module whose ``main(argv)`` runs ``ayo compare``: installed with Ayo, found by name.
COMPARE_ENTRY_POINT = "ayo_bench.compare"


def _cmd_models(args: argparse.Namespace) -> int:
    from ayo_core import models

    folders = models.prepare_all(progress=True)
    for name, folder in folders.items():
        print(f"{name}: {folder}")
    return 0


def _cmd_serve(argv: list[str]) -> int:
    from ayo_core.engines.llm_server import main_serve

    return main_serve(argv) or 0


def _cmd_compare(argv: list[str]) -> int:
    try:
        compare = importlib.import_module(COMPARE_ENTRY_POINT)
    except ModuleNotFoundError as exc:
        # Only the runner's own package missing is a packaging problem; anything it fails to
        # import (a framework, an adapter) propagates with its own name.
        if exc.name not in (COMPARE_ENTRY_POINT, COMPARE_ENTRY_POINT.partition(".")[0]):
            raise
        raise SystemExit(
            f"ayo compare: {COMPARE_ENTRY_POINT} is not importable ({exc}). It is installed with Ayo; "
            "reinstall the distribution (`pip install .`, or `make env` in a checkout)."
        ) from exc
    return compare.main(argv) or 0


def _cmd_cluster(argv: list[str]) -> int:
    from ayo_core.cluster.cli import main as cluster_main

    return cluster_main(argv) or 0


def _cmd_emulate(argv: list[str]) -> int:
    from ayo_core.emulate.cli import main as emulate_main

    return emulate_main(argv) or 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ayo`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="ayo", description="Ayo: make LlamaIndex/LangChain apps faster.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the vLLM server (see `ayo serve --help`)", add_help=False)
    models_p = sub.add_parser("models", help="prepare the local models")
    models_p.add_argument("action", choices=["prepare"])
    sub.add_parser("compare", help="stock vs Ayo on the same engines (see `ayo compare --help`)", add_help=False)
    sub.add_parser("cluster", help="engines as replicas on Ray: up | status | down", add_help=False)
    sub.add_parser("emulate", help="an emulated deployment: serve | profiles | calibrate", add_help=False)
    handlers = {"serve": _cmd_serve, "compare": _cmd_compare, "cluster": _cmd_cluster, "emulate": _cmd_emulate}
    if argv and argv[0] in handlers:
        handler = handlers[argv[0]]
        return handler(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "models":
        return _cmd_models(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
