"""The coverage table of ``docs/modules.md`` (framework module -> lowered / local node / opaque, and why),
generated from the adapters' registries so it cannot drift from what they do.

    python -m benchmarks.coverage_table            # print the table
    python -m benchmarks.coverage_table --update   # rewrite the block in docs/modules.md
    python -m benchmarks.coverage_table --check    # exit 1 when docs/modules.md differs from the registries

The rows are ``ayo_llamaindex.coverage.coverage()`` and ``ayo_langchain.coverage.coverage()``: each
adapter's own recognizers run on one object of every module class (see ``ayo_core.coverage``).
``--update`` replaces the text between ``<!-- coverage:start -->`` and ``<!-- coverage:end -->``
(the markers must exist); ``--check`` prints what differs, and the command that fixes it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

from ayo_bench import emulated_table
from ayo_core.coverage import END, START, CoverageRow, render_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "modules.md"
FIX = "python -m benchmarks.coverage_table --update"
# the releases whose exports and classes the rows are about (a new release may export a new module)
FRAMEWORKS = ("llama-index-core", "langchain-core", "langchain-classic")
VERSIONS_LINE = "Generated with: "


def framework_versions() -> str:
    """``llama-index-core 0.14.25, langchain-core 1.8.3, ...``: the installed releases the table is about."""
    from importlib.metadata import version

    return ", ".join(f"{name} {version(name)}" for name in FRAMEWORKS)


def committed_versions(doc: Path = DOC) -> str | None:
    """The releases ``doc``'s table was generated with (None when it does not say)."""
    for line in committed_block(doc.read_text(encoding="utf-8"), doc.name).splitlines():
        if line.startswith(VERSIONS_LINE):
            return line[len(VERSIONS_LINE):].strip().rstrip(".")
    return None


def generated_rows() -> list[CoverageRow]:
    """Every row, LlamaIndex's then LangChain's, as the installed adapters decide them today."""
    from ayo_langchain import coverage as langchain_coverage
    from ayo_llamaindex import coverage as llamaindex_coverage

    return [*llamaindex_coverage.coverage(), *langchain_coverage.coverage()]


def table(rows: list[CoverageRow] | None = None) -> str:
    """The Markdown that goes between the markers: the releases it is about, then the rows."""
    return f"{VERSIONS_LINE}{framework_versions()}.\n\n" + render_markdown(generated_rows() if rows is None else rows)


def committed_block(text: str, name: str = DOC.name) -> str:
    """The text between the markers of ``text``; ValueError naming the file when they are missing."""
    if START not in text or END not in text:
        raise ValueError(f"{name} has no {START} ... {END} block: add the two markers where the table goes")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def differences(doc: Path = DOC, rows: list[CoverageRow] | None = None) -> list[str]:
    """What differs between ``doc``'s table and the generated one, as unified-diff lines ([] when equal)."""
    committed = committed_block(doc.read_text(encoding="utf-8"), doc.name)
    generated = table(rows)
    return list(difflib.unified_diff(committed.splitlines(), generated.splitlines(),
                                     f"{doc.name} (committed)", "generated from the registries", n=0, lineterm=""))


def main(argv: list[str] | None = None) -> int:
    # the LangChain rows build an in-memory Chroma collection: no telemetry from a docs check
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=DOC, help="the Markdown file holding the markers")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="rewrite the table between the markers")
    mode.add_argument("--check", action="store_true", help="exit 1 when the table differs from the registries")
    args = parser.parse_args(argv)
    if args.check:
        diff = differences(args.doc)
        if diff:
            print("\n".join(diff))
            print(f"\n{args.doc.name}: the coverage table differs from what the adapters' registries give "
                  f"(lines above: - committed, + generated). If the change is intended, run `{FIX}` and commit "
                  "the doc; if not, a module changed state: find which registry did it.")
            return 1
        print(f"{args.doc.name}: the coverage table matches the registries")
        return 0
    if args.update:
        emulated_table.replace_block(args.doc, START, END, table() + "\n")  # the README tables' block writer
        print(f"{args.doc}: coverage table rewritten")
        return 0
    sys.stdout.write(table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
