"""An example remote service for Floe's external functions (see README.md)."""
