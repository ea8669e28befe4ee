"""What each adapter makes of a framework's modules, as rows the docs' coverage table is generated from.

Every adapter's ``coverage()`` returns :class:`CoverageRow` s built by running its own recognizers
(registries, dispatch functions) on one object of each class: a small real object where the decision
reads its fields, else a :func:`probe` (an instance whose ``__init__`` never ran) where the decision
reads only its type. So the table says what the code does today: ``benchmarks/coverage_table.py``
writes it into ``docs/modules.md`` and fails ``--check`` when the two differ.

States: **lowered** (Ayo re-types the module into a core template whose primitives it schedules: LLM
calls on its engine, embeddings, searches), **local node** (the user's object runs as it is, locally,
in one node of Ayo's graph: a :class:`~ayo_core.templates.Transform` or
:class:`~ayo_core.templates.LocalRerank`), **opaque** (not recognized: the user's object runs as
stock in one opaque node, or ``optimize`` returns it unchanged; the row says why).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ayo_core.modules import OPAQUE

LOWERED, LOCAL_NODE, OPAQUE_STATE = "lowered", "local node", "opaque"
STATES = (LOWERED, LOCAL_NODE, OPAQUE_STATE)
# templates whose one node calls the user's own object locally (nothing split, nothing sent to an engine)
LOCAL_NODE_TEMPLATES = frozenset({"Transform", "LocalRerank"})
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


@dataclass(frozen=True)
class CoverageRow:
    """One framework module (one construction of it, ``case``) and what an adapter makes of it."""

    framework: str  # "LlamaIndex" | "LangChain"
    group: str  # the table it belongs to ("node postprocessors", "capture module kinds", ...)
    module: str  # the framework class's dotted name
    state: str  # one of STATES
    template: str  # the core template it lowers to ("Rerank", "Synthesis(mode=refine)", "Transform"), or "Opaque"
    why: str  # why this state; for a state that depends on construction, what flips it
    case: str = ""  # the construction the row is about ("response_mode='refine'", "RunnablePassthrough(func)")

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"CoverageRow {self.module}: state {self.state!r} is not one of {STATES}")


def state_of(template: str) -> str:
    """The state a module is in when an adapter maps it to ``template``."""
    if template == OPAQUE:
        return OPAQUE_STATE
    return LOCAL_NODE if template in LOCAL_NODE_TEMPLATES else LOWERED


def row(framework: str, group: str, cls: type, template: str, why: str, case: str = "") -> CoverageRow:
    """A row whose state follows from ``template`` (see :func:`state_of`)."""
    return CoverageRow(framework, group, dotted(cls), state_of(template), template, why, case)


def dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def probe(cls: type) -> Any:
    """An instance of ``cls`` whose ``__init__`` never ran: enough for a decision made from the type alone.

    An abstract class cannot be instantiated, and what a user passes is a subclass of it anyway: the
    probe is then an instance of a subclass (same name and module) that defines nothing of its own.
    """
    if inspect.isabstract(cls):
        concrete = type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        concrete.__abstractmethods__ = frozenset()  # ABCMeta recomputes it at class creation: cleared after
        cls = concrete
    return object.__new__(cls)


def exported_classes(module: ModuleType, base: type) -> list[type]:
    """The subclasses of ``base`` that ``module`` exports (``__all__``), by name.

    Names it exports that are no such class (enums, data models, deprecated stubs) and names whose
    lazy import fails (their package is not installed) are left out: they are no module Ayo could meet.
    A class exported under two names (an alias) is listed once.
    """
    classes: list[type] = []
    for name in getattr(module, "__all__", ()):
        try:
            obj = getattr(module, name)
        except (ImportError, AttributeError):
            continue
        if isinstance(obj, type) and issubclass(obj, base) and obj not in classes:
            classes.append(obj)
    return sorted(classes, key=lambda c: c.__name__)


def counts(rows: Iterable[CoverageRow]) -> dict[tuple[str, str], int]:
    """``{(framework, state): number of rows}``."""
    return dict(Counter((r.framework, r.state) for r in rows))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _module_cell(r: CoverageRow) -> str:
    return f"`{r.module}`" + (f" ({_cell(r.case)})" if r.case else "")


def render_markdown(rows: list[CoverageRow]) -> str:
    """The coverage table: a count per framework and state, then one table per framework and group."""
    frameworks = list(dict.fromkeys(r.framework for r in rows))
    tally = counts(rows)
    lines = ["| framework | " + " | ".join(STATES) + " |", "|---|" + "---|" * len(STATES)]
    lines += [f"| {fw} | " + " | ".join(str(tally.get((fw, s), 0)) for s in STATES) + " |" for fw in frameworks]
    for fw in frameworks:
        lines += ["", f"### {fw}"]
        for group in dict.fromkeys(r.group for r in rows if r.framework == fw):
            lines += ["", f"#### {group}", "", "| module | state | template | why |", "|---|---|---|---|"]
            lines += [f"| {_module_cell(r)} | {r.state} | {_cell(r.template)} | {_cell(r.why)} |"
                      for r in rows if r.framework == fw and r.group == group]
    return "\n".join(lines)
