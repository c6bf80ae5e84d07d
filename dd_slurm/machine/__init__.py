"""The attempt state machine: `table` declares it, `attempt` runs it, `journal` records it."""
