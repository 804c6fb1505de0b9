"""Local infrastructure of Floe: the process manager behind ``make up``/``make down`` (``infra.stack``)."""
