"""The examples' corpus: Python standard-library docstrings, prepared deterministically.

Why this text: it is real prose nobody on this project wrote, and every machine that
runs Ayo has it offline (it ships with the interpreter). Modules are read as *source*
with :mod:`ast` (never imported), so no module's import-time side effects can run and
the result depends only on the interpreter's standard library files.

Each document is ``{"id", "title", "text"}``:

* one per module with a substantial module docstring (id ``"json"``),
* one per public top-level function or class with a docstring (id ``"json.dumps"``),
  its text starting with the signature.

The list of modules is fixed and sorted; at most :data:`MAX_MEMBERS_PER_MODULE`
members per module are kept, in source order, and texts are capped at
:data:`MAX_CHARS` so indexing stays cheap on a 2-core CPU. The JSONL file lands in
``$AYO_HOME/corpus`` and is rewritten only when its bytes would change.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from ayo_core.models import ayo_home

log = logging.getLogger(__name__)

CORPUS_FILE = "stdlib_docs.jsonl"
MANIFEST_FILE = "manifest.json"
MAX_CHARS = 1500
MIN_MEMBER_DOC = 80
MIN_MODULE_DOC = 200
MAX_MEMBERS_PER_MODULE = 12

# Pure-Python modules whose docstrings read well. Deliberately absent: modules with
# import side effects (antigravity, this, idlelib, tkinter, turtle, turtledemo,
# webbrowser) and GUI / platform-specific ones. Sorted; the order is the corpus order.
MODULES: tuple[str, ...] = tuple(sorted((
    "abc", "argparse", "asyncio.locks", "asyncio.queues", "base64", "bisect", "calendar",
    "collections", "colorsys", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "difflib", "email.utils", "enum", "filecmp",
    "fileinput", "fnmatch", "fractions", "functools", "getopt", "gettext", "glob",
    "graphlib", "gzip", "heapq", "hmac", "html", "html.parser", "http.cookies", "inspect",
    "ipaddress", "json", "json.decoder", "json.encoder", "keyword", "linecache", "logging",
    "mimetypes", "numbers", "operator", "optparse", "os", "pathlib", "pickle", "platform",
    "posixpath", "pprint", "queue", "quopri", "random", "re", "sched", "secrets",
    "selectors", "shelve", "shlex", "shutil", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "traceback",
    "types", "typing", "urllib.parse", "uuid", "warnings", "wave", "weakref", "zipfile",
)))


def corpus_dir(home: Path | None = None) -> Path:
    """Folder holding the prepared corpus (``$AYO_HOME/corpus``)."""
    return (home or ayo_home()) / "corpus"


def _module_source(module: str) -> Path:
    base = Path(sysconfig.get_paths()["stdlib"]).joinpath(*module.split("."))
    path = base.with_suffix(".py")
    return path if path.exists() else base / "__init__.py"


def _cap(text: str, limit: int = MAX_CHARS) -> str:
    """Cut ``text`` to ``limit`` chars at a paragraph (else word) boundary."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = head.rfind("\n\n")
    if cut < limit // 2:
        cut = head.rfind(" ")
    return head[:cut].rstrip()


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, qualname: str) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {qualname}({bases})" if bases else f"class {qualname}"
    prefix = "async def " if isinstance(node, ast.AsyncFunctionDef) else ""
    return f"{prefix}{qualname}({ast.unparse(node.args)})"


def _module_documents(module: str) -> list[dict[str, str]]:
    tree = ast.parse(_module_source(module).read_text(encoding="utf-8"))
    docs: list[dict[str, str]] = []
    module_doc = ast.get_docstring(tree)
    if module_doc and len(module_doc) >= MIN_MODULE_DOC:
        docs.append({"id": module, "title": f"{module} module", "text": _cap(f"Module {module}.\n\n{module_doc}")})
    members = 0
    for node in tree.body:
        if members >= MAX_MEMBERS_PER_MODULE:
            break
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < MIN_MEMBER_DOC:
            continue
        qualname = f"{module}.{node.name}"
        docs.append({"id": qualname, "title": qualname, "text": _cap(f"{_signature(node, qualname)}\n\n{doc}")})
        members += 1
    return docs


def build_documents() -> list[dict[str, str]]:
    """All corpus documents, in corpus order (pure: reads the stdlib sources only)."""
    docs: list[dict[str, str]] = []
    seen: set[str] = set()
    for module in MODULES:
        for doc in _module_documents(module):
            if doc["id"] not in seen:  # a re-exported name keeps its first home
                seen.add(doc["id"])
                docs.append(doc)
    return docs


def _serialize(docs: list[dict[str, str]]) -> bytes:
    lines = (json.dumps(d, ensure_ascii=False, sort_keys=True) for d in docs)
    return ("\n".join(lines) + "\n").encode("utf-8")


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so a concurrent reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return True


def prepare_corpus(home: Path | None = None) -> Path:
    """Write the corpus JSONL (and a manifest) into ``$AYO_HOME/corpus``; idempotent.

    Returns the JSONL path. Files are rewritten only if their content would change.
    """
    docs = build_documents()
    data = _serialize(docs)
    folder = corpus_dir(home)
    path = folder / CORPUS_FILE
    manifest = {
        "python": ".".join(map(str, sys.version_info[:3])),
        "modules": list(MODULES),
        "documents": len(docs),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    changed = _write_if_changed(path, data)
    _write_if_changed(folder / MANIFEST_FILE, (json.dumps(manifest, indent=1) + "\n").encode())
    if changed:
        log.info("corpus: wrote %d documents to %s", len(docs), path)
    return path


def load_corpus(home: Path | None = None) -> list[dict[str, str]]:
    """The corpus documents (prepared on first use)."""
    path = prepare_corpus(home)
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.lru_cache(maxsize=4)
def _by_id(home: Path | None) -> dict[str, dict[str, str]]:
    return {d["id"]: d for d in load_corpus(home)}


def get_documents(ids: list[str], home: Path | None = None) -> list[dict[str, str]]:
    """The documents with these ids, in the given order; a missing id is an error."""
    table = _by_id(home)
    missing = [i for i in ids if i not in table]
    if missing:
        raise KeyError(
            f"corpus has no document(s) {missing}: the question file and the corpus disagree "
            "(regenerate questions with `python -m examples.data.make_questions`)."
        )
    return [table[i] for i in ids]
