"""Where a user's stage (``@~``) keeps its files: a prefix of its own in Floe's stages bucket.

Snowflake gives every user a stage of its own, referenced as ``@~``: only that user reaches it (no
grant can name it, and no role, however privileged, lists another user's), it cannot be altered or
dropped, and it goes with its user. Floe keeps its files beside the named and table stages
(``floe.catalog.internal``), under ``users/<key>/``, sealed the same way (``floe.stage_crypto``).

The key is derived from the user's name and creation time rather than stored: a user created again
(DROP USER then CREATE USER, or CREATE OR REPLACE USER) is a new user with an empty stage, as in
Snowflake, while re-registering the admin's key (which keeps its creation time) or ALTER USER keeps
the stage. A hash, so no user name, however spelled, reaches outside its prefix.
"""

from __future__ import annotations

import hashlib

from floe.catalog.models import User
from floe.settings import Settings

USER_PREFIX = "users/"
"""Key prefix of user stages in the stages bucket."""


def user_stage_key(user: User) -> str:
    """The folder of ``user``'s stage in the stages bucket (without the prefix)."""
    return hashlib.sha256(f"{user.name}\0{user.created_ms}".encode()).hexdigest()[:32]


def user_stage_url(settings: Settings, user: User) -> str:
    """The location of ``user``'s stage, for this incarnation of the user."""
    return f"s3://{settings.stages.bucket}/{USER_PREFIX}{user_stage_key(user)}/"
