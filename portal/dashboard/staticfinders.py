"""A static-files finder for the plotly.js that the installed ``plotly`` package ships.

The dashboard's charts need plotly.js; pages load it from our own static files
(never a CDN), and the file is not copied into the repository: this finder
exposes the package's ``package_data/plotly.min.js`` as
``dashboard/vendor/plotly.min.js``. ``collectstatic`` copies it like any other
static file, and WhiteNoise (with ``WHITENOISE_USE_FINDERS``) serves it
directly during development. Upgrading the ``plotly`` package upgrades the
script; the browser and Python sides then always agree on the version.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "dashboard/vendor/plotly.min.js"
_PREFIX, _, _NAME = PLOTLY_STATIC_PATH.rpartition("/")


def plotly_js_path() -> Path:
    """The file shipped by the installed plotly package."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / _NAME


class _PrefixedStorage(FileSystemStorage):
    """The package_data folder, published under ``dashboard/vendor/``."""

    prefix = _PREFIX


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.source = plotly_js_path()
        self.storage = _PrefixedStorage(location=str(self.source.parent))

    def check(self, **kwargs: object) -> list[Error]:
        if not self.source.is_file():
            return [Error(f"plotly.js not found at {self.source}; reinstall the plotly package",
                          id="dashboard.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: object) -> str | list[str]:
        find_all = bool(kwargs.pop("all", find_all))  # Django < 6.1 may still pass ``all``
        if os.path.normpath(path) == os.path.normpath(PLOTLY_STATIC_PATH) and self.source.is_file():
            return [str(self.source)] if find_all else str(self.source)
        return [] if find_all else ""

    def list(self, ignore_patterns: list[str] | None):
        if self.source.is_file():
            yield _NAME, self.storage
