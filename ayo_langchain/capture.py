"""Capture: walk an LCEL runnable into a tree of modules Ayo knows how to lower.

Capture is static introspection of the user's objects; it never calls them. Every
node of the tree keeps the user's runnable, so lowering can always fall back to
calling it as-is: something Ayo does not recognize becomes :class:`Opaque` (still a
graph node, still parallel with independent work), never an error. Recognition is by
exact class where a subclass could change behaviour (a subclass of
``VectorStoreRetriever`` may override ``_aget_relevant_documents``), by base class
where Ayo only calls the object's own public methods (prompts, parsers).

Run-time structure (``RunnableBranch`` picks, routing functions that return a
runnable) is captured lazily: the branch's arms are captured when chosen.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.output_parsers import BaseOutputParser
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableBranch,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSequence,
)
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.runnables.passthrough import RunnableAssign, RunnablePick
from langchain_core.runnables.retry import RunnableRetry

from ayo_core.introspect import overridden
from ayo_core.modules import OPAQUE, BoundModule, ModuleGraph, TypeDispatch
from ayo_shims import langchain as shims

log = logging.getLogger(__name__)


# ---- the module tree -------------------------------------------------------------------
@dataclass
class Module:
    """One captured module; ``runnable`` is the user's object (what a fallback calls)."""

    runnable: Any
    wrappers: tuple[Any, ...] = ()  # enclosing RunnableBindings (innermost last) whose config applies

    @property
    def kind(self) -> str:
        return type(self).__name__

    def label(self) -> str:
        try:
            return self.runnable.get_name()
        except Exception:  # noqa: BLE001 - a label must never fail capture
            return type(self.runnable).__name__

    def children(self) -> list[Module]:
        return []


@dataclass
class Sequence(Module):
    steps: list[Module] = field(default_factory=list)

    def children(self) -> list[Module]:
        return list(self.steps)


@dataclass
class Parallel(Module):
    branches: dict[str, Module] = field(default_factory=dict)

    def children(self) -> list[Module]:
        return list(self.branches.values())


@dataclass
class Identity(Module):
    """``RunnablePassthrough()``: the input flows on unchanged (no node)."""


@dataclass
class Assign(Module):
    """``RunnablePassthrough.assign(...)``: the input dict plus the mapper's outputs."""

    mapper: Parallel | None = None

    def children(self) -> list[Module]:
        return [self.mapper] if self.mapper else []


@dataclass
class Pick(Module):
    """``.pick(keys)``."""


@dataclass
class Lambda(Module):
    """A ``RunnableLambda`` (an opaque transform; may return a runnable to route to)."""

    inline: bool = False  # operator.itemgetter & co: pure and cheap, no thread hop


@dataclass
class Branch(Module):
    """A ``RunnableBranch``: conditions are evaluated in order at run time."""


@dataclass
class Prompt(Module):
    """A prompt template (formatted with its own code)."""


@dataclass
class Model(Module):
    """``ChatOpenAI`` / ``OpenAI`` at an OpenAI-compatible server: lowered to a DECODE on the LLM engine."""

    model: Any = None  # the leaf model object (runnable may be a binding around it)
    chat: bool = True


@dataclass
class Parser(Module):
    """An output parser (the user's object parses)."""

    line_list: bool = False  # parse(text) is "non-empty lines of text.strip()"


@dataclass
class VectorRetriever(Module):
    """``VectorStoreRetriever`` over ``langchain_chroma.Chroma`` with ``HuggingFaceEmbeddings`` or
    ``OpenAIEmbeddings`` (an OpenAI-compatible embedding server); or a ``MultiVectorRetriever`` /
    ``ParentDocumentRetriever`` over such a store (the chunks found, then their parents from its docstore)."""

    vectorstore: Any = None
    embeddings: Any = None
    parents: bool = False  # MultiVectorRetriever: the chunks' parent documents from its docstore


@dataclass
class MultiQuery(Module):
    """``MultiQueryRetriever``: generate queries, retrieve each, unique union."""

    retriever: Module | None = None
    llm_chain: Module | None = None

    def children(self) -> list[Module]:
        return [m for m in (self.llm_chain, self.retriever) if m is not None]


@dataclass
class Ensemble(Module):
    """``EnsembleRetriever``: all retrievers on the same query, weighted reciprocal rank fusion."""

    retrievers: list[Module] = field(default_factory=list)
    merge: str = "rrf"

    def children(self) -> list[Module]:
        return list(self.retrievers)


@dataclass
class Merger(Ensemble):
    """``MergerRetriever``: all retrievers on the same query at once (stock's invoke: one after another),
    their lists interleaved as its ``merge_documents`` does."""

    merge: str = "interleave"


@dataclass
class Opaque(Module):
    """Anything else: one node that calls the user's runnable as-is."""

    reason: str = ""


# ---- recognition -----------------------------------------------------------------------
_INLINE_FUNCS = (operator.itemgetter, operator.attrgetter)
_BINDING_METHODS = ("invoke", "ainvoke", "stream", "astream", "transform", "atransform", "batch", "abatch")


def _cls(obj: Any) -> type:
    """The class of ``obj``, seen through pydantic generic parametrization (``RunnableParallel[dict]``)."""
    return shims.generic_origin(type(obj))


def _plain_binding(obj: Any) -> bool:
    """A ``RunnableBinding`` (or a subclass that only narrows types, like ``_ChatModelBinding``)."""
    from langchain_core.runnables.base import RunnableBindingBase

    return isinstance(obj, RunnableBinding) and not overridden(obj, RunnableBindingBase, _BINDING_METHODS)


def _is_line_list_parser(parser: Any) -> bool:
    try:
        from langchain_classic.retrievers.multi_query import LineListOutputParser
    except ImportError:  # pragma: no cover - langchain-classic is a dependency
        return False
    return type(parser) is LineListOutputParser


def _openai_model(obj: Any) -> tuple[bool, bool]:
    """(recognized, chat) for a langchain-openai model Ayo can route to its LLM engine."""
    try:
        from langchain_openai import ChatOpenAI, OpenAI
    except ImportError:  # pragma: no cover
        return False, False
    if type(obj) is ChatOpenAI:
        return True, True
    if type(obj) is OpenAI:
        return True, False
    return False, False


def embeddings_supported(emb: Any) -> str:
    """'' when one of Ayo's embedding engines reproduces ``emb.embed_query``, else why not."""
    try:
        from langchain_openai import OpenAIEmbeddings
    except ImportError:  # pragma: no cover - langchain-openai is a dependency
        OpenAIEmbeddings = None  # noqa: N806
    if OpenAIEmbeddings is not None and type(emb) is OpenAIEmbeddings:
        return openai_embeddings_supported(emb)
    try:
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError:  # pragma: no cover
        return "langchain-huggingface is not installed"
    if type(emb) is not HuggingFaceEmbeddings:
        return f"embeddings {type(emb).__name__} are not HuggingFaceEmbeddings or OpenAIEmbeddings"
    if emb.multi_process:
        return "multi_process embeddings"
    if set(emb.model_kwargs) - {"device"} or emb.model_kwargs.get("device", "cpu") != "cpu":
        return f"model_kwargs {emb.model_kwargs} (only device='cpu' is reproduced)"
    kwargs = emb.query_encode_kwargs or emb.encode_kwargs
    if set(kwargs) - {"normalize_embeddings", "batch_size", "convert_to_numpy"}:
        return f"encode kwargs {sorted(kwargs)} (only normalize_embeddings is reproduced)"
    return ""


# OpenAIEmbeddings settings under which its client sends what Ayo's remote engine does not: field -> why
_OPENAI_EMBEDDINGS_OPAQUE: dict[str, str] = {
    "openai_proxy": "a proxy", "http_client": "its own http_client", "http_async_client": "its own http_async_client",
    "default_query": "default_query parameters", "openai_organization": "an organization header",
    "headers": "headers",
}


def openai_embeddings_supported(emb: Any) -> str:
    """'' when Ayo's remote embedding engine sends what ``OpenAIEmbeddings.embed_query`` sends, else why not."""
    from ayo_core.engines.remote_embedding import SENT_PARAMS
    from ayo_shims import langchain_embeddings as emb_shim

    if emb.check_embedding_ctx_length:
        return ("check_embedding_ctx_length=True (stock tokenizes with tiktoken and averages the chunks of long "
                "texts; set it False for an OpenAI-compatible server)")
    if not emb.openai_api_base:
        return "no base_url (the openai SDK's default server)"
    if callable(emb.openai_api_key):
        return "an api_key callable"
    for name, what in _OPENAI_EMBEDDINGS_OPAQUE.items():
        if getattr(emb, name, None):
            return f"{what} is set (a transport Ayo would bypass)"
    params = emb_shim.embeddings_invocation_params(emb)
    if unknown := sorted(set(params) - SENT_PARAMS - {"model"}):
        return f"request fields {unknown} (only {sorted(SENT_PARAMS)} are reproduced)"
    if params.get("encoding_format", "float") != "float":
        return f"encoding_format={params['encoding_format']!r} (the SDK returns it undecoded)"
    return ""


def _multi_vector_classes() -> tuple[type, ...]:
    try:
        from langchain_classic.retrievers import MultiVectorRetriever, ParentDocumentRetriever
    except ImportError:  # pragma: no cover - langchain-classic is a dependency
        return ()
    return MultiVectorRetriever, ParentDocumentRetriever


def _vector_retriever(r: Any) -> tuple[bool, str]:
    from langchain_core.vectorstores import VectorStoreRetriever

    if type(r) is not VectorStoreRetriever and type(r) not in _multi_vector_classes():
        return False, ""
    try:
        from langchain_chroma import Chroma
    except ImportError:  # pragma: no cover
        return False, "langchain-chroma is not installed"
    if type(r.vectorstore) is not Chroma:
        return False, f"vector store {type(r.vectorstore).__name__} is not langchain_chroma.Chroma"
    if r.search_type not in ("similarity", "mmr"):
        return False, f"search_type {r.search_type!r} runs as-is"
    why = embeddings_supported(r.vectorstore.embeddings)
    return (not why), why


# class -> recognizer(capturer, runnable, wrappers) -> Module, or None for the usual capture: the
# adapter's other modules register the patterns they lower (ayo_langchain.history)
RECOGNIZERS: TypeDispatch[Callable[..., Module | None]] = TypeDispatch("LangChain capture", resolve=_cls)


class Capturer:
    """Walks runnables into :class:`Module` trees; remembers what stayed opaque and why."""

    def __init__(self) -> None:
        self.opaque: list[tuple[str, str]] = []

    def capture(self, obj: Any, wrappers: tuple[Any, ...] = ()) -> Module:
        runnable = obj if isinstance(obj, Runnable) else coerce_to_runnable(obj)
        module = self._capture(runnable, wrappers)
        if isinstance(module, Opaque):
            self.opaque.append((module.label(), module.reason))
        return module

    def _capture(self, r: Any, wrappers: tuple[Any, ...]) -> Module:
        t = _cls(r)
        recognize = RECOGNIZERS.find(r)
        special = recognize(self, r, wrappers) if recognize is not None else None
        if special is not None:
            return special
        if t is RunnableSequence:
            return Sequence(r, wrappers, [self.capture(s, wrappers) for s in r.steps])
        if t is RunnableParallel:
            return Parallel(r, wrappers, {k: self.capture(v, wrappers) for k, v in r.steps__.items()})
        if t is RunnablePassthrough:
            if r.func is None and getattr(r, "afunc", None) is None:
                return Identity(r, wrappers)
            return Opaque(r, wrappers, "RunnablePassthrough with a side-effect function")
        if t is RunnableAssign:
            mapper = self.capture(r.mapper, wrappers)
            if isinstance(mapper, Parallel):
                return Assign(r, wrappers, mapper)
            return Opaque(r, wrappers, "assign() with an unexpected mapper")
        if t is RunnablePick:
            return Pick(r, wrappers)
        if t is RunnableLambda:
            return Lambda(r, wrappers, inline=isinstance(getattr(r, "func", None), _INLINE_FUNCS))
        if t is RunnableBranch:
            return Branch(r, wrappers)
        if _plain_binding(r):
            return self._binding(r, wrappers)
        if t is RunnableRetry:
            return self._around_model(r, r.bound, "with_retry()", wrappers)
        if t is RunnableWithFallbacks:
            return self._around_model(r, r.runnable, "with_fallbacks()", wrappers)
        return self._leaf(r, wrappers)

    def _around_model(self, r: Any, inner: Any, what: str, wrappers: tuple[Any, ...]) -> Module:
        """``model.with_retry(...)`` / ``model.with_fallbacks([...])``: the model, its retries or
        fallbacks kept. The node calls LangChain's own ``RunnableRetry`` / ``RunnableWithFallbacks``
        (their runs, attempts, exception filters), with the model inside routed to Ayo's engine
        (a fallback model is called as it is, by its own client)."""
        while _plain_binding(inner) and not inner.config_factories:
            inner = inner.bound
        ok, chat = _openai_model(inner)
        if ok:
            return Model(r, wrappers, model=inner, chat=chat)
        return Opaque(r, wrappers, f"{what} around {type(inner).__name__}: called as-is")

    def _binding(self, r: RunnableBinding, wrappers: tuple[Any, ...]) -> Module:
        if r.config_factories:
            return Opaque(r, wrappers, "binding with config factories (listeners)")
        inner = r.bound
        while _plain_binding(inner) and not inner.config_factories:
            inner = inner.bound
        ok, chat = _openai_model(inner)
        if ok:
            return Model(r, wrappers, model=inner, chat=chat)
        if r.kwargs:
            # kwargs go to the bound runnable's invoke: the binding is called as one node
            return Opaque(r, wrappers, f"bound kwargs on {type(r.bound).__name__}: called as-is")
        # with_config / with_types: the bound runnable runs under the merged config
        return self.capture(r.bound, (*wrappers, r))

    def _leaf(self, r: Any, wrappers: tuple[Any, ...]) -> Module:
        ok, chat = _openai_model(r)
        if ok:
            return Model(r, wrappers, model=r, chat=chat)
        if isinstance(r, BasePromptTemplate):
            return Prompt(r, wrappers)
        if isinstance(r, BaseOutputParser):
            return Parser(r, wrappers, line_list=_is_line_list_parser(r))
        if isinstance(r, BaseRetriever):
            return self._retriever(r, wrappers)
        from langchain_core.language_models import BaseLanguageModel

        if isinstance(r, BaseLanguageModel):
            return Opaque(r, wrappers, f"model {type(r).__name__} is not ChatOpenAI/OpenAI: called as-is")
        return Opaque(r, wrappers, f"{type(r).__name__} is not recognized: called as-is")

    def _retriever(self, r: Any, wrappers: tuple[Any, ...]) -> Module:
        ok, why = _vector_retriever(r)
        if ok:
            return VectorRetriever(r, wrappers, vectorstore=r.vectorstore, embeddings=r.vectorstore.embeddings,
                                   parents=type(r) in _multi_vector_classes())
        try:
            from langchain_classic.retrievers import EnsembleRetriever, MergerRetriever, MultiQueryRetriever
        except ImportError:  # pragma: no cover
            EnsembleRetriever = MergerRetriever = MultiQueryRetriever = ()  # noqa: N806
        if MultiQueryRetriever and type(r) is MultiQueryRetriever:
            from langchain_classic.chains.llm import LLMChain

            if isinstance(r.llm_chain, LLMChain):
                return Opaque(r, wrappers, "MultiQueryRetriever with a legacy LLMChain")
            return MultiQuery(r, wrappers, retriever=self.capture(r.retriever), llm_chain=self.capture(r.llm_chain))
        if EnsembleRetriever and type(r) is EnsembleRetriever:
            return Ensemble(r, wrappers, retrievers=[self.capture(x) for x in r.retrievers])
        if MergerRetriever and type(r) is MergerRetriever:  # stock's sync path invokes them one after another
            return Merger(r, wrappers, retrievers=[self.capture(x) for x in r.retrievers])
        return Opaque(r, wrappers, why or f"retriever {type(r).__name__} is called as-is")


def capture(runnable: Any) -> tuple[Module, list[tuple[str, str]]]:
    """Capture ``runnable``; returns the module tree and the (label, reason) of every opaque part."""
    c = Capturer()
    return c.capture(runnable), c.opaque


def walk(module: Module) -> Iterator[Module]:
    """``module`` and every module below it, depth first."""
    yield module
    for child in module.children():
        yield from walk(child)


def format_tree(module: Module, indent: int = 0) -> str:
    """The module tree as indented text (for ``explain()``)."""
    return "\n".join("  " * indent + line for line in module_graph(module).lines())


# captured class -> the core template kind it lowers to ("Sequence"/"Parallel": the composition itself)
TEMPLATES: dict[type[Module], str] = {
    Sequence: "Sequence", Parallel: "Parallel", Identity: "Transform", Assign: "Transform", Pick: "Transform",
    Lambda: "Transform", Prompt: "Transform", Parser: "Transform", Branch: "Route", Model: "LLMCall",
    VectorRetriever: "Retrieval", MultiQuery: "QueryExpansion", Ensemble: "Aggregate", Merger: "Aggregate", Opaque: OPAQUE}


def module_graph(root: Module, opaque_reason: Callable[[Module], str] | None = None) -> ModuleGraph:
    """The core :class:`~ayo_core.modules.ModuleGraph` of a captured tree: each module bound to the
    user's runnable with its template kind; ``opaque_reason(m)`` says why a recognized module still
    runs as-is (a model at an endpoint Ayo's engine does not serve), '' when it is lowered."""

    def bind(m: Module, name: str) -> BoundModule:
        reason = m.reason if isinstance(m, Opaque) else (opaque_reason(m) if opaque_reason else "")
        items = m.branches.items() if isinstance(m, Parallel) else enumerate(m.children())
        label = m.label()
        return BoundModule(name, OPAQUE if reason else TEMPLATES[type(m)], m.runnable, reason,
                           [bind(c, f"{name}.{key}") for key, c in items],
                           detail="" if label == type(m.runnable).__name__ else label)

    return ModuleGraph(bind(root, "root"))


# ---- what optimize() returns unchanged ----------------------------------------------------
# Packages of the LangChain ecosystem whose non-runnable objects optimize() hands back (with a warning)
# rather than refusing: a user passing a graph builder or a store gets their object, running as stock.
_LANGCHAIN_PACKAGES = ("langchain", "langgraph")


def _not_runnable_fixes() -> list[tuple[str, str, str]]:
    """(module, class, the fix) for the non-runnables users most often pass by mistake."""
    return [
        ("langgraph.graph.state", "StateGraph",
         "a graph builder: pass the compiled graph, optimize(builder.compile(...))"),
        ("langgraph.checkpoint.base", "BaseCheckpointSaver",
         "a checkpointer: compile the graph with it (builder.compile(checkpointer=...)) and optimize that graph"),
        ("langchain_core.chat_history", "BaseChatMessageHistory",
         "a message history: optimize the RunnableWithMessageHistory(chain, get_session_history) that uses it"),
        ("langchain_core.vectorstores", "VectorStore",
         "a vector store: optimize a chain that uses vectorstore.as_retriever(...)"),
    ]


def not_runnable_reason(obj: Any) -> str | None:
    """Why ``optimize`` returns ``obj`` unchanged: a LangChain / LangGraph object that is no runnable and
    that LCEL would not coerce (no dict, no callable); None for anything ``optimize`` takes or refuses."""
    import importlib

    if isinstance(obj, (Runnable, dict)) or callable(obj):
        return None
    if not any(getattr(c, "__module__", "").split(".")[0].startswith(_LANGCHAIN_PACKAGES)
               for c in type(obj).__mro__[:-1]):
        return None
    what = "not a runnable: pass an LCEL runnable (a chain) or a compiled LangGraph graph"
    for module, name, fix in _not_runnable_fixes():
        try:
            base = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # an optional package not installed
            continue
        if isinstance(obj, base):
            what = fix
            break
    return f"{type(obj).__name__} is returned unchanged (it runs as stock, unoptimized): it is {what}"
