"""The web console the API serves at /console: pipes, load history, channels, tables and a SQL
box, as the signed-in user sees them (README, "Web console"; decision 89).

`floe console` prints a one-time sign-in link (``CODES_PATH``); the API's gate passes every
``/console`` path (``is_console_path``) to the console's own session check.
"""

from services.console.routes import CODES_PATH, PREFIX, console_router, is_console_path
from services.console.sessions import Grant, SignIns

__all__ = ["CODES_PATH", "PREFIX", "Grant", "SignIns", "console_router", "is_console_path"]
