"""Floe services: the SQS consumer, dedup-and-enqueue, the HTTP API, SQL execution and queries."""

from services.consumer import Consumer
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor

__all__ = ["Consumer", "Deduper", "FileRef", "SqlExecutor"]
