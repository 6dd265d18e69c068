"""The installed package's version (a leaf module, so that any layer may read it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("recourselab")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
