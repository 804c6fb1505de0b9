"""Attacks the security suite runs against a live API, one module per kind of attack.

Each module holds plain functions that build or send an attack; the tests in ``tests/security``
run them through the real API and assert the refusal. New attacks go here, so the suite can grow.
"""
