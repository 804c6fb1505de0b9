"""An example remote service for Floe's external functions: currency conversion and a sentiment stub.

Run it with ``python -m uvicorn examples.remote_service.app:app --host 127.0.0.1 --port 8901``. When
``REMOTE_SERVICE_API_KEY`` is set, every request must carry Floe's signature keyed by it (the API
integration's API_KEY); unsigned, altered or stale requests get 401.
"""

from __future__ import annotations

import os
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from floe.external.remote import endpoint

API_KEY_ENV = "REMOTE_SERVICE_API_KEY"
"""The environment variable holding the API key whose signature requests must carry."""

USD_PER_UNIT = {
    "USD": Decimal("1"),
    "EUR": Decimal("1.08"),
    "GBP": Decimal("1.27"),
    "JPY": Decimal("0.0067"),
    "CHF": Decimal("1.13"),
}
"""Fixed rates: US dollars for one unit of each currency."""

_POSITIVE = frozenset({"good", "great", "excellent", "love", "happy", "fast", "nice", "wonderful"})
_NEGATIVE = frozenset({"bad", "terrible", "awful", "hate", "sad", "slow", "broken", "poor"})
_WORD = re.compile(r"[a-z']+")


def convert(amount: Decimal | int | None, currency: str | None) -> Decimal | None:
    """``amount`` of ``currency`` in US dollars, to the cent; NULL for NULL input or an unknown
    currency (one unknown code should not fail the other rows of its batch)."""
    if amount is None or currency is None:
        return None
    rate = USD_PER_UNIT.get(currency.strip().upper())
    if rate is None:
        return None
    return (Decimal(amount) * rate).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def sentiment(text: str | None) -> dict[str, Any] | None:
    """A word-counting stand-in for a sentiment model: a score in [-1, 1] and its label."""
    if text is None:
        return None
    words = _WORD.findall(text.lower())
    positive = sum(word in _POSITIVE for word in words)
    negative = sum(word in _NEGATIVE for word in words)
    score = 0.0 if positive + negative == 0 else (positive - negative) / (positive + negative)
    label = "positive" if score > 0 else "negative" if score < 0 else "neutral"
    return {"score": round(score, 3), "label": label}


async def health(request: Request) -> JSONResponse:
    """Liveness probe."""
    return JSONResponse({"ok": True})


def create_app(api_key: str | None = None) -> Starlette:
    """The service; with ``api_key``, requests must be signed with it."""
    return Starlette(
        routes=[
            Route("/convert", endpoint(convert, api_key=api_key), methods=["POST"]),
            Route("/sentiment", endpoint(sentiment, api_key=api_key), methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


app = create_app(os.environ.get(API_KEY_ENV) or None)
