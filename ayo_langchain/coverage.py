"""What the LangChain adapter makes of LangChain's modules: the rows of ``docs/modules.md``.

Every row is the adapter's own capture (:func:`ayo_langchain.capture.capture`: its ``RECOGNIZERS``
registry, then its exact-class checks) of one object, and the template ``capture.TEMPLATES`` maps
the captured module to. The objects are small real ones, built here and never called (a model at
an address nothing listens on, an in-memory Chroma collection), so a decision that reads fields
(a compressor's chain, a retriever's store and embeddings) is the one users get; a class whose
capture reads only its type is captured as a :func:`~ayo_core.coverage.probe`. Groups: the module
kinds capture knows (and a few constructions that keep one opaque), every retriever
``langchain_classic.retrievers`` exports, and every compressor
``langchain_classic.retrievers.document_compressors`` exports, inside a
``ContextualCompressionRetriever``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from ayo_core.coverage import CoverageRow, exported_classes, probe, row
from ayo_langchain import capture as cap
from ayo_langchain.compressors import Compression
from ayo_langchain.each import Each
from ayo_langchain.history import History, HistoryAware
from ayo_shims import langchain as shims

FRAMEWORK = "LangChain"
_URL = "http://127.0.0.1:9/v1"  # never called: the objects are only captured
# what flips a recognized module with its construction, by the captured module class
NOTES: dict[type, str] = {
    cap.Sequence: "each step captured and lowered; a step's work overlaps independent work of the others",
    cap.Parallel: "each branch captured and lowered; the branches run concurrently",
    cap.Assign: "an assign() whose mapper is not a parallel map stays opaque",
    cap.Prompt: "any BasePromptTemplate",
    cap.Parser: "any BaseOutputParser",
    cap.Model: "exact ChatOpenAI / OpenAI class; when optimize() does not serve its base_url it is called as-is",
    cap.VectorRetriever: "exact VectorStoreRetriever, MultiVectorRetriever or ParentDocumentRetriever, search_type "
                         "similarity or mmr; another store, search type or "
                         "embeddings keeps it opaque (the reason names which)",
    cap.MultiQuery: "exact class; one whose llm_chain is a legacy LLMChain stays opaque",
    cap.Ensemble: "exact class",
    cap.Merger: "exact class",
    Compression: "exact class; LLMChainExtractor / LLMChainFilter alone or as stages of a DocumentCompressorPipeline "
                 "lowered per document, any other compressor or transformer run as the user's object in its node; "
                 "a legacy LLMChain or a subclass stays opaque (compressors table)",
    History: "exact class; a subclass stays opaque",
    HistoryAware: "recognized by its branch's condition; any other RunnableBranch is a plain branch",
    Each: "exact class; a subclass stays opaque",
}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # langchain_classic re-exports moved classes with a deprecation warning per name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def captured_row(group: str, obj: Any, case: str = "", cls: type | None = None) -> CoverageRow:
    """The row of ``obj`` (shown as ``cls``, default its own class) as the adapter captures it."""
    module, _opaque = cap.capture(obj)
    template = cap.TEMPLATES[type(module)]
    if isinstance(module, cap.Opaque):
        why = module.reason
    else:
        why = "; ".join(part.rstrip(".") for part in (_doc(type(module)), NOTES.get(type(module), "")) if part)
    return row(FRAMEWORK, group, cls or shims.generic_origin(type(obj)), template, why, case)


def _doc(module_cls: type) -> str:
    """The first paragraph of a captured module class's own docstring ('' for a dataclass's generated one)."""
    doc = module_cls.__dict__.get("__doc__") or ""
    if doc.startswith(f"{module_cls.__name__}("):
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def coverage() -> list[CoverageRow]:
    """Every row of the LangChain tables (see the module docstring)."""
    with _quiet():
        parts = Parts()
        return [*module_kind_rows(parts), *retriever_rows(parts), *compressor_rows(parts)]


class Parts:
    """The small real objects the examples are built from (models at an address nothing listens on)."""

    def __init__(self) -> None:
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_openai import ChatOpenAI

        self.llm = ChatOpenAI(model="coverage", base_url=_URL, api_key="unused")
        self.prompt = ChatPromptTemplate.from_template("{question}")
        self.retriever = self.chroma("ayo-coverage", check_embedding_ctx_length=False).as_retriever()

    @staticmethod
    def chroma(name: str, **embedding_kwargs: Any) -> Any:
        """An in-memory Chroma collection over ``OpenAIEmbeddings`` at an OpenAI-compatible address.

        Chroma's default client settings: chromadb keeps one in-memory system per process and refuses a
        second client with other settings (``ANONYMIZED_TELEMETRY`` sets telemetry, as for any client)."""
        from langchain_chroma import Chroma
        from langchain_openai import OpenAIEmbeddings

        emb = OpenAIEmbeddings(model="coverage", base_url=_URL, api_key="unused", **embedding_kwargs)
        return Chroma(collection_name=name, embedding_function=emb)


# -- the module kinds capture knows ---------------------------------------------------------
def _examples(p: Parts) -> list[tuple[str, Callable[[], Any]]]:
    """``(construction, build)`` per example: what users write, and one object of it."""
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnableBranch, RunnableLambda, RunnableParallel, RunnablePassthrough
    from langchain_core.runnables.passthrough import RunnablePick
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import OpenAI

    return [
        ("PromptTemplate.from_template(...)", lambda: PromptTemplate.from_template("{question}")),
        ("ChatPromptTemplate.from_template(...)", lambda: p.prompt),
        ("ChatOpenAI(base_url=...)", lambda: p.llm),
        ("OpenAI(base_url=...)", lambda: OpenAI(model="coverage", base_url=_URL, api_key="unused")),
        ("chat_model.bind(stop=[...])", lambda: p.llm.bind(stop=["\n"])),
        ("prompt.with_config(run_name=...)", lambda: p.prompt.with_config(run_name="named")),
        ("chat_model.with_retry()", lambda: p.llm.with_retry()),
        ("chat_model.with_fallbacks([...])", lambda: p.llm.with_fallbacks([p.llm])),
        ("another chat model class (FakeListChatModel)", lambda: FakeListChatModel(responses=["x"])),
        ("StrOutputParser()", StrOutputParser),
        ("prompt | model", lambda: p.prompt | p.llm),
        ("RunnableParallel(...) or a dict literal", lambda: RunnableParallel(answer=p.prompt)),
        ("RunnablePassthrough()", RunnablePassthrough),
        ("RunnablePassthrough(func)", lambda: RunnablePassthrough(print)),
        ("RunnablePassthrough.assign(...)", lambda: RunnablePassthrough.assign(n=RunnableLambda(len))),
        (".pick(keys)", lambda: RunnablePick("answer")),
        ("RunnableLambda(func)", lambda: RunnableLambda(len)),
        ("RunnableLambda(itemgetter(...))", lambda: RunnableLambda(itemgetter("question"))),
        ("RunnableBranch((condition, runnable), default)", lambda: RunnableBranch((bool, p.prompt), p.prompt)),
        ("create_history_aware_retriever(...)", lambda: _history_aware(p)),
        ("runnable.map()", lambda: p.prompt.map()),
        ("Chroma(...).as_retriever(), OpenAIEmbeddings(base_url=..., check_embedding_ctx_length=False)",
         lambda: p.retriever),
        ("Chroma(...).as_retriever(), OpenAIEmbeddings(base_url=...) with its default check_embedding_ctx_length",
         lambda: p.chroma("ayo-coverage-default").as_retriever()),
        ("InMemoryVectorStore(...).as_retriever()",
         lambda: InMemoryVectorStore(embedding=p.retriever.vectorstore.embeddings).as_retriever()),
        ("MultiQueryRetriever.from_llm(...)", lambda: _multi_query(p)),
        ("EnsembleRetriever(retrievers=[...])", lambda: _ensemble(p)),
        ("ContextualCompressionRetriever(LLMChainExtractor.from_llm(...))", lambda: _compression(p)),
        ("RunnableWithMessageHistory(chain, get_session_history)", lambda: _with_history(p)),
        ("legacy LLMChain(llm=..., prompt=...)", lambda: _legacy_chain(p)),
    ]


def module_kind_rows(p: Parts) -> list[CoverageRow]:
    return [captured_row("capture module kinds", build(), case) for case, build in _examples(p)]


def _history_aware(p: Parts) -> Any:
    from langchain_classic.chains import create_history_aware_retriever
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("chat_history"), ("human", "{input}")])
    return create_history_aware_retriever(p.llm, p.retriever, prompt)


def _multi_query(p: Parts) -> Any:
    from langchain_classic.retrievers import MultiQueryRetriever

    return MultiQueryRetriever.from_llm(retriever=p.retriever, llm=p.llm)


def _ensemble(p: Parts) -> Any:
    from langchain_classic.retrievers import EnsembleRetriever

    return EnsembleRetriever(retrievers=[p.retriever, p.retriever], weights=[0.5, 0.5])


def _merger(p: Parts) -> Any:
    from langchain_classic.retrievers import MergerRetriever

    return MergerRetriever(retrievers=[p.retriever, p.retriever])


def _compression(p: Parts, compressor: Any = None) -> Any:
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor

    compressor = compressor if compressor is not None else LLMChainExtractor.from_llm(p.llm)
    # model_construct: a probe compressor has no fields to validate (the capture reads only its type)
    return ContextualCompressionRetriever.model_construct(base_compressor=compressor, base_retriever=p.retriever)


def _with_history(p: Parts) -> Any:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.runnables.history import RunnableWithMessageHistory

    return RunnableWithMessageHistory(p.prompt | p.llm, lambda _session: InMemoryChatMessageHistory(),
                                      input_messages_key="question")


def _legacy_chain(p: Parts) -> Any:
    from langchain_classic.chains.llm import LLMChain

    return LLMChain(llm=p.llm, prompt=p.prompt)


# -- langchain_classic's retrievers and compressors ------------------------------------------
def _retriever_examples(p: Parts) -> dict[type, tuple[str, Callable[[], Any]]]:
    """Retriever classes whose capture reads the object's fields: ``(construction, build)`` of a small real
    one that stands for the class."""
    from langchain_classic.retrievers import (
        ContextualCompressionRetriever,
        EnsembleRetriever,
        MergerRetriever,
        MultiQueryRetriever,
        MultiVectorRetriever,
        ParentDocumentRetriever,
    )

    return {MultiQueryRetriever: ("from_llm(...)", lambda: _multi_query(p)),
            EnsembleRetriever: ("", lambda: _ensemble(p)),
            MergerRetriever: ("MergerRetriever(retrievers=[...])", lambda: _merger(p)),
            ContextualCompressionRetriever: ("with LLMChainExtractor.from_llm(...)", lambda: _compression(p)),
            MultiVectorRetriever: ("over Chroma(...), docstore=InMemoryStore()", lambda: _multi_vector(p)),
            ParentDocumentRetriever: ("over Chroma(...), docstore=InMemoryStore()", lambda: _parent_document(p))}


def _multi_vector(p: Parts) -> Any:
    from langchain_classic.retrievers import MultiVectorRetriever
    from langchain_core.stores import InMemoryStore

    return MultiVectorRetriever(vectorstore=p.retriever.vectorstore, docstore=InMemoryStore())


def _parent_document(p: Parts) -> Any:
    from langchain_classic.retrievers import ParentDocumentRetriever
    from langchain_core.stores import InMemoryStore
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return ParentDocumentRetriever(vectorstore=p.retriever.vectorstore, docstore=InMemoryStore(),
                                   child_splitter=RecursiveCharacterTextSplitter(chunk_size=400))


def retriever_rows(p: Parts) -> list[CoverageRow]:
    """One row per retriever class ``langchain_classic.retrievers`` exports."""
    import langchain_classic.retrievers as lc_retrievers
    from langchain_core.retrievers import BaseRetriever

    examples = _retriever_examples(p)
    rows = []
    for cls in exported_classes(lc_retrievers, BaseRetriever):
        case, build = examples.get(cls, ("", lambda cls=cls: probe(cls)))
        rows.append(captured_row("retrievers (langchain_classic.retrievers)", build(), case, cls))
    return rows


def compressor_rows(p: Parts) -> list[CoverageRow]:
    """One row per compressor ``langchain_classic.retrievers.document_compressors`` exports, in a
    ``ContextualCompressionRetriever`` (the compressors Ayo lowers are built with ``from_llm``)."""
    import langchain_classic.retrievers.document_compressors as lc_compressors
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor, LLMChainFilter
    from langchain_core.documents import BaseDocumentCompressor

    group = "document compressors (langchain_classic.retrievers.document_compressors)"
    rows = []
    for cls in exported_classes(lc_compressors, BaseDocumentCompressor):
        if cls in (LLMChainExtractor, LLMChainFilter):
            compressor, case = cls.from_llm(p.llm), "from_llm(...), in a ContextualCompressionRetriever"
        elif cls is lc_compressors.DocumentCompressorPipeline:
            compressor = cls(transformers=[LLMChainExtractor.from_llm(p.llm)])
            case = "DocumentCompressorPipeline(transformers=[LLMChainExtractor.from_llm(...), ...])"
        else:
            compressor, case = probe(cls), "in a ContextualCompressionRetriever"
        retriever = _compression(p, compressor)
        module, _opaque = cap.capture(retriever)
        if isinstance(module, Compression) and all(stage.chain is None for stage in module.stages):
            rows.append(row(FRAMEWORK, group, cls, "Transform", "local work: the compressor runs as the user's "
                            "object (compress_documents / acompress_documents) in one node after the lowered base "
                            "retriever", case))
            continue
        rows.append(captured_row(group, retriever, case, cls))
    return rows
