"""The fixedid release, recorded in every checkpoint."""

#: The package version (PEP 440), printed by every entry point's --version.
__version__ = "0.1.0"
