"""Packages: the import packages found by name, plus two folders installed under another name.

``shims/`` is installed as ``ayo_shims`` and ``examples/`` as ``ayo_examples`` (a folder a user
reads keeps its plain name; the installed name says whose it is). The question files ship as
package data so ``ayo compare`` runs from a non-editable install.
"""

from setuptools import find_packages, setup

MAPPED_FOLDERS = {"shims": "ayo_shims", "examples": "ayo_examples"}  # folder -> import name


def mapped_packages(folder: str, name: str) -> list[str]:
    """``folder`` and its subpackages, under the import name ``name``."""
    return [name + found[len(folder):] for found in find_packages(include=[folder, f"{folder}.*"])] or [name]


packages = find_packages(include=["ayo_core*", "ayo_llamaindex*", "ayo_langchain*", "ayo_bench*"])
for folder, name in MAPPED_FOLDERS.items():
    packages += mapped_packages(folder, name)
setup(
    packages=packages,
    package_dir={name: folder for folder, name in MAPPED_FOLDERS.items()},
    package_data={"ayo_examples.data": ["*.json"], "ayo_core.engines": ["chat_templates/*.jinja"]},
)
