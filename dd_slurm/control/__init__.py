"""The login-node plane: submit, status, list, logs, watch, timeline text, inspect, shards. Uses plan,
scheduler and store; never the runtime."""
