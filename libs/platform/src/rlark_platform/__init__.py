"""Shared runtime for RLark services: settings, Postgres, Kafka messaging (outbox/inbox), observability.

Services import this library and ``rlark_contracts`` only; never each other.
"""
