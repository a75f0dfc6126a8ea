"""The package version (one place: the package, reports and the server read it here)."""

__version__ = "0.3.0"
