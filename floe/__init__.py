"""Floe core: settings, errors, the catalog and the storage contracts shared by services and pipeline."""

from floe.errors import FloeError, SqlError, TerminalError, TransientError
from floe.settings import Settings

__all__ = ["FloeError", "Settings", "SqlError", "TerminalError", "TransientError"]
