"""Kafka message schemas the bundled kafka-python lacks (delegation-token APIs 38-41).

Written for kgov from the Kafka protocol's message definitions (field names, types and versions);
loaded by kafka-python's schema-driven codec like its own.
"""
