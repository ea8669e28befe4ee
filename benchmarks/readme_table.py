"""The README's results table, generated from ``benchmarks/results/*.json``.

    python -m benchmarks.readme_table                 # print the Markdown
    python -m benchmarks.readme_table --update README.md
    python -m benchmarks.readme_table --check README.md   # exit 1 if the table and results disagree

``--update`` replaces the text between ``<!-- results:start -->`` and
``<!-- results:end -->`` in the given file (the markers must exist). The header comes from
the results' ``provenance`` (commit, server version, dtype and launch flags, model, machine,
dates; see ``ayo_bench.provenance``) and the block records the commit it was measured at.
``--check`` flags (``check``; each problem has a kind, below):

- a results file whose summary differs from the one its per-pair records give today
  (``ayo_bench.compare.summarize_latency`` over ``pairs``): a figure edited, or computed by other code;
- a README table that is not the rendering of the results, or a row from another commit than the
  one the README names (``<!-- results:commit SHA -->``);
- a results file that README.md or docs/*.md name (``benchmarks/results/NAME.json``) and that does
  not exist, or a results file without full provenance (commit, dirty flag, machine);
- provenance a tool did not write (a field outside ``ayo_bench.provenance``'s), a dirty tree, and a
  machine path (a worktree location) anywhere in a results file.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from ayo_bench import emulated_table, provenance, stats

RESULTS_DIR = Path(__file__).resolve().parent / "results"
START, END = "<!-- results:start -->", "<!-- results:end -->"
COMMIT_MARK = re.compile(r"<!-- results:commit ([0-9a-f]{7,40}(?:,[0-9a-f]{7,40})*|none) -->")
PREDATES = "results predate provenance"
SUMMARY_MISMATCH = "summary differs from its pairs"
SUMMARY_KEYS = "summary keys differ from today's code"  # re-measure: written by other code
STALE_TABLE = "README table is not the rendering of the results"
QUOTED_MISSING = "quoted results file missing"
INCOMPLETE = "incomplete provenance"
HAND_FIELD = "provenance field no tool writes"
MACHINE_PATH = "machine path"
DIRTY = "dirty tree"
# what ayo_bench.provenance.git_state / code_state write: anything else was added by hand
TOOL_GIT_FIELDS = {"commit", "dirty", "source", "changes", "imported_elsewhere"}
QUOTED = re.compile(r"benchmarks/results/([\w.-]+\.json)")
ORDER = ("naive_rag", "advanced_rag", "search_augmented", "contextual_retrieval", "agent", "graph", "chat", "sub_question")


def _s(value: Any, unit: str = " s", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return f"{value:.{digits}f}{unit}"


def load_results(folder: Path = RESULTS_DIR) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(latency results, load results) by app name."""
    latency, load = {}, {}
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(".trace.json"):
            continue
        data = json.loads(path.read_text())
        if not is_compare_result(path, data):
            continue
        (load if "load" in data else latency)[data["app"]] = data
    return latency, load


def is_compare_result(path: Path, data: dict[str, Any]) -> bool:
    """A row of the table: what `ayo compare APP` writes, ``APP.json`` or ``APP-load.json``. Other
    benchmarks' files may name an app too (``load.json`` from ``benchmarks/load.py``) but are not rows."""
    return "app" in data and path.stem.removesuffix("-load") == data["app"]


def _interval(d: dict[str, Any]) -> str:
    """Geometric-mean ratio, its 95 % interval and what it shows, from the pairs themselves (so
    results written before ``ayo compare`` reported the interval get one too)."""
    ci = stats.ratio_interval([p["ratio"] for p in d.get("pairs", []) if "ratio" in p])
    if ci is None:
        return "–"
    return f"{ci.geomean:.2f}x [{ci.low:.2f}–{ci.high:.2f}]: {ci.verdict}"


def _latency_row(name: str, d: dict[str, Any]) -> str:
    s = d["summary"]
    same = f"{s['identical_answers']}/{s['n']}" if "identical_answers" in s else "–"
    # the gap and overhead come from Ayo's busiest-engine utilization (files from before it: "–")
    bounded = "busiest_engine" in s or "utilization_engine" in s
    gap = s.get("gap_median_s") or {}
    gap_parts = (" / ".join(_s(gap.get(k)) for k in ("outside_graph", "other_engine", "queued", "runtime"))
                 if bounded else "–")
    overhead = _s(s.get("ayo_overhead_median_pct"), " %", 3) if bounded else "–"
    return (f"| {name} | {s['n']} | {_s(s['stock_median_s'])} | {_s(s.get('ayo_median_s'))} | "
            f"{_s(s.get('median_ratio'), 'x')} ({_s(s.get('balanced_ratio'), 'x')}) | {_interval(d)} | {_s(s['stock_p95_s'])} / {_s(s.get('ayo_p95_s'))} | {same} | "
            f"{_over_bound(s)} | {gap_parts} | {overhead} |")


def _over_bound(s: dict[str, Any]) -> str:
    """Ayo's latency / the lower bound that holds for any schedule (median, min over the pairs);
    files measured before the bound have none: "not measured"."""
    if "latency_over_bound_median" not in s:
        return "not measured"
    return f"{_s(s['latency_over_bound_median'], 'x')} (min {_s(s.get('latency_over_bound_min'), 'x')})"


def _load_row(name: str, d: dict[str, Any]) -> str:
    ld = d["load"]
    st, ay = ld["stock"]["summary"], ld.get("ayo", {}).get("summary", {})
    return (f"| {name} | {ld['rate_qps']} | {ld['n']} | {_s(st['throughput_qps'], ' q/s')} / "
            f"{_s(ay.get('throughput_qps'), ' q/s')} | {_s(st['p50_s'])} / {_s(ay.get('p50_s'))} | "
            f"{_s(st['p95_s'])} / {_s(ay.get('p95_s'))} | {ld.get('all_identical', '–')} |")


def header(results: list[dict[str, Any]]) -> list[str]:
    """The lines above the tables: where the numbers come from, from the results' provenance."""
    provs = [d.get("provenance") for d in results]
    dates = sorted(d["date"][:10] for d in results)
    first = results[0]
    m = first["machine"]
    common = (f"model {first['model']} (greedy, max_tokens {first['max_tokens']}), search latency "
              f"{first['search_latency_s']} s, dates {dates[0]}–{dates[-1]}")
    commits = sorted({p["git"]["commit"] or "none" for p in provs if p})
    # a table re-measured in part names every commit (the check holds each file to one of them)
    named = all(provs) and "none" not in commits
    mark = f"<!-- results:commit {','.join(commits) if named else 'none'} -->"
    if not all(provs):
        return [mark, f"Measured on {m['cpu']} ({m['cores']} cores), {common}; {PREDATES} "
                      "(commit, server version, dtype and flags not recorded). Generated by `benchmarks/readme_table.py`.", ""]
    p = provs[0]
    srv = p["server"]
    dirty = " (dirty tree)" if any(q["git"]["dirty"] for q in provs) else ""
    # a machine's folders are not the README's business: a path flag shows its last part
    flags = " ".join(Path(f).name if f.startswith("/") else f for f in srv.get("launch_flags") or [])
    launched = f"launched by Ayo with `{flags}`" if srv.get("launch_flags") else "given by URL (launch flags unknown)"
    return [mark, f"Measured at commit {_commits_line(results)}{dirty} on {m['cpu']} ({m['cores']} cores), "
                  f"vLLM {srv.get('version')} ({srv.get('dtype')}; server {launched}), {common}. "
                  "Generated by `benchmarks/readme_table.py`.", ""]


def _commits_line(results: list[dict[str, Any]]) -> str:
    """```abc1234567``` for one commit; else the commit most apps were measured at, then each other
    commit with its apps (``(chat, sub_question: `def4567890`)``)."""
    apps: dict[str, list[str]] = {}
    for d in results:
        apps.setdefault(d["provenance"]["git"]["commit"], []).append(str(d.get("app", "?")))
    main, *others = sorted(apps, key=lambda c: (-len(apps[c]), c))
    rest = "; ".join(f"{', '.join(sorted(apps[c]))}: `{c[:10]}`" for c in others)
    return f"`{main[:10]}`" + (f" ({rest})" if rest else "")


def render(folder: Path = RESULTS_DIR) -> str:
    latency, load = load_results(folder)
    if not latency and not load:
        return "_No results yet: run `ayo compare all --out benchmarks/results`._\n"
    lines = header(list({**latency, **load}.values()))
    if latency:
        lines += ["| app | n | stock median | Ayo median | median ratio (order-balanced) | ratio: geometric mean [95 % interval] | "
                  "p95 stock / Ayo | identical | "
                  "Ayo latency / lower bound (any schedule), median (min) | gap: outside graph / other engines / queued / idle | "
                  "Ayo overhead |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [_latency_row(k, latency[k]) for k in sorted(latency, key=_rank)]
        lines.append("")
    if load:
        lines += ["| app (load) | rate | n | throughput stock / Ayo | p50 stock / Ayo | p95 stock / Ayo | identical |",
                  "|---|---|---|---|---|---|---|"]
        lines += [_load_row(k, load[k]) for k in sorted(load, key=_rank)]
        lines.append("")
    return "\n".join(lines)


def readme_commit(readme: Path) -> str | None:
    """The commit(s) the README's table says it was measured at, comma-separated when it was re-measured in
    part (None: the table predates provenance)."""
    match = COMMIT_MARK.search(readme.read_text())
    return None if match is None or match.group(1) == "none" else match.group(1)


Problem = tuple[str, str, str]  # (file, kind, message)


def check(readme: Path, folder: Path = RESULTS_DIR, docs: list[Path] | None = None) -> list[Problem]:
    """Every problem with the README's table, the prose's named results files and the results themselves
    (module docstring), as ``(file, kind, message)``. ``docs``: the prose files besides ``readme``
    (default: the ``docs/*.md`` next to it)."""
    problems: list[Problem] = []
    commit = readme_commit(readme)
    if commit is None:
        problems.append((readme.name, PREDATES, f"{readme.name} has no `<!-- results:commit SHA -->` in its table: "
                         "regenerate it with --update from results that carry provenance"))
    problems += check_table(readme, folder)
    if emulated_table.stale(readme, folder):
        problems.append((readme.name, STALE_TABLE, f"{readme.name}'s emulated table differs from the rendering of "
                         f"{folder.name}/: python benchmarks/readme_table.py --update {readme.name}"))
    problems += check_quoted([readme, *(docs if docs is not None else sorted(readme.parent.glob("docs/*.md")))],
                             folder)
    for path in sorted(folder.glob("*.json")):
        if not path.name.endswith(".trace.json"):
            data = json.loads(path.read_text()) if path.stat().st_size else {}
            problems += check_file(path.name, data, commit)
    return problems


def check_file(name: str, data: dict[str, Any], commit: str | None) -> list[Problem]:
    """One results file: its summary against its pairs, its provenance, its commit (a table row), its paths."""
    problems = [(name, kind, message) for kind, message in summary_problems(data)]
    prov = data.get("provenance")
    git = (prov or {}).get("git") or {}
    if not prov:
        problems.append((name, PREDATES, f"{name}: no provenance (re-measure it with `ayo compare ... "
                         "--out benchmarks/results` or its benchmark script)"))
    elif not git or git.get("dirty") is None or not isinstance(prov.get("machine"), dict):
        problems.append((name, INCOMPLETE, f"{name}: provenance without the commit, dirty flag or machine "
                         "(ayo_bench.provenance.collect writes them): re-measure it"))
    elif is_compare_result(Path(name), data) and commit is not None and not any(
            (git.get("commit") or "").startswith(c) for c in commit.split(",")):
        problems.append((name, "different commit", f"{name} was measured at {git.get('commit')}, "
                         f"the README table at {commit}: re-measure one of them"))
    if git.get("dirty"):
        problems.append((name, DIRTY, f"{name} was measured on a tree with uncommitted changes "
                         f"({git.get('changes') or git.get('imported_elsewhere')})"))
    if extra := sorted(set(git) - TOOL_GIT_FIELDS):
        problems.append((name, HAND_FIELD, f"{name}: provenance.git has {extra}, which no tool writes "
                         "(provenance is never edited): re-measure it"))
    if paths := provenance.machine_paths(data):
        problems.append((name, MACHINE_PATH, f"{name} holds {len(paths)} machine path(s), e.g. {paths[0]!r}: "
                         "re-measure it (the writers now write paths relative to the checkout)"))
    return problems


def summary_problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """``ayo compare``'s summary recomputed from the file's own pairs, against the stored one."""
    if not (isinstance(data.get("pairs"), list) and isinstance(data.get("summary"), dict)):
        return []
    from ayo_bench.compare import summarize_latency

    stored, recomputed = data["summary"], summarize_latency(data["pairs"])
    differing = [f"{key}: stored {stored[key]!r}, from the pairs {recomputed[key]!r}"
                 for key in sorted(stored.keys() & recomputed.keys()) if not _same(stored[key], recomputed[key])]
    out = [(SUMMARY_MISMATCH, f"summary differs from its {len(data['pairs'])} pairs: {'; '.join(differing)}")
           ] if differing else []
    if one_sided := sorted(stored.keys() ^ recomputed.keys()):
        out.append((SUMMARY_KEYS, f"summary keys {one_sided} only on one side of stored / recomputed (written by "
                    "other code than today's summarize_latency): re-measure it"))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-9 relative (a JSON round trip), NaN equal to NaN, dicts and lists item by item."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def check_table(readme: Path, folder: Path) -> list[Problem]:
    """The README's generated block must be what the results render to today (its every figure is theirs)."""
    text = readme.read_text()
    if START not in text or END not in text:
        return [(readme.name, STALE_TABLE, f"{readme.name} has no {START} ... {END} block")]
    block = text.split(START, 1)[1].split(END, 1)[0]
    if block.strip() == render(folder).strip():
        return []
    return [(readme.name, STALE_TABLE, f"{readme.name}'s table differs from the rendering of {folder.name}/: "
             f"python benchmarks/readme_table.py --update {readme.name}")]


def check_quoted(prose: list[Path], folder: Path) -> list[Problem]:
    """Every ``benchmarks/results/NAME.json`` the prose names must exist (its provenance is checked with
    the other results files)."""
    problems = []
    for doc in prose:
        for name in sorted(set(QUOTED.findall(doc.read_text()))):
            if not (folder / name).is_file():
                problems.append((name, QUOTED_MISSING, f"{doc.name} quotes {name}, which is not in {folder.name}/: "
                                 "measure it with its benchmark script or drop the figure"))
    return problems


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def update(path: Path, table: str) -> None:
    emulated_table.replace_block(path, START, END, f"{table}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_DIR))
    parser.add_argument("--update", metavar="FILE", help="replace the table between the markers in FILE")
    parser.add_argument("--check", metavar="FILE", help="exit 1 if FILE's table and the results disagree")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(Path(args.check), Path(args.results))
        for _, kind, message in problems:
            print(f"{kind}: {message}")
        print(f"{len(problems)} problem(s)" if problems else
              "README table and results agree (summaries, rendering, provenance, commit, quoted files)")
        return 1 if problems else 0
    table = render(Path(args.results))
    if args.update:
        update(Path(args.update), table)
        if emulated_table.START in Path(args.update).read_text():
            emulated_table.update(Path(args.update), Path(args.results))
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
