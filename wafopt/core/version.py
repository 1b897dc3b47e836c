"""The package version, written into every solution and exploration store."""

__version__ = "0.2.0"
