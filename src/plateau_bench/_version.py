"""The installed version, from the package's metadata (``pyproject.toml`` is the one place it is set).

Its own module so that what needs the version (the client's User-Agent, the twin's ``/version``, the
result's tool record) does not import the package root, which imports the result store.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("plateau-bench")
except PackageNotFoundError:   # run from a source tree that was never installed
    __version__ = "0+unknown"
