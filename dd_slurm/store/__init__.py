"""Persisted records. Every write goes through `atomic.write_atomic`."""
