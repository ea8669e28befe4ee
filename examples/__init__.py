"""The five example apps, installed as ``ayo_examples`` (setup.py maps this folder).

Each app (``naive_rag``, ``advanced_rag``, ``search_augmented``, ``contextual_retrieval``,
``agent``) is plain stock LlamaIndex / LangChain code plus one ``optimize(...)`` line. Beside
them lives only what they run against: where the engines are (``common``), the documents
(``corpus``: Python standard-library docstrings), a loopback web-search stand-in
(``search_service``) and the committed questions (``data/``).

The folder is a package, not a set of scripts, so ``ayo compare`` (``ayo_bench``) runs the
apps from an installed distribution as well as from a checkout; inside the package the apps
import their helpers relatively, so ``python -m examples.naive_rag`` keeps working in a
checkout and ``python -m ayo_examples.naive_rag`` anywhere.
"""
