"""Packages: the three import packages found by name, plus ``shims/`` installed as ``ayo_shims``."""

from setuptools import find_packages, setup

packages = find_packages(include=["ayo_core*", "ayo_llamaindex*", "ayo_langchain*"])
packages += ["ayo_shims" + name[len("shims"):] for name in find_packages(include=["shims*"])] or ["ayo_shims"]
setup(packages=packages, package_dir={"ayo_shims": "shims"})
