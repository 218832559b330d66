"""Kafka message schemas the bundled kafka-python lacks: the delegation-token APIs (38-41) and KIP-848's
ConsumerGroupHeartbeat (68, v0-1) and ConsumerGroupDescribe (69, v0-1, as in Kafka 4.x).

Written for kgov from the Kafka protocol's message definitions (field names, types and versions);
loaded by kafka-python's schema-driven codec like its own.
"""
