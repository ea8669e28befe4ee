"""Packages: the import packages found by name, ``ayo_shims`` found under ``shims/``, and one folder
installed under another name.

``shims/`` holds the package ``ayo_shims`` (``shims/ayo_shims/``) beside its README, so the import
path is the folder path. ``examples/`` is installed as ``ayo_examples`` (a folder a user reads keeps
its plain name; the installed name says whose it is). The question files ship as package data so
``ayo compare`` runs from a non-editable install.
"""

from setuptools import find_packages, setup

SOURCE_FOLDERS = ("shims",)  # folders that hold packages of their own name (shims/ayo_shims)
MAPPED_FOLDERS = {"examples": "ayo_examples"}  # folder -> import name


def mapped_packages(folder: str, name: str) -> list[str]:
    """``folder`` and its subpackages, under the import name ``name``."""
    return [name + found[len(folder):] for found in find_packages(include=[folder, f"{folder}.*"])] or [name]


packages = find_packages(include=["ayo_core*", "ayo_llamaindex*", "ayo_langchain*", "ayo_bench*"])
package_dir = {}
for folder in SOURCE_FOLDERS:
    for found in find_packages(where=folder):
        packages.append(found)
        package_dir[found] = f"{folder}/{found.replace('.', '/')}"
for folder, name in MAPPED_FOLDERS.items():
    packages += mapped_packages(folder, name)
    package_dir[name] = folder
setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"ayo_examples.data": ["*.json"], "ayo_core.engines": ["chat_templates/*.jinja"]},
)
