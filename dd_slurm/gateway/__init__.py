"""The gateway: one loopback OpenAI-compatible URL per model alias over every replica of it.

Standard library asyncio (plus attrs for its frozen config records): it runs from the runtime
bundle on a compute node. `python -m dd_slurm.gateway CONFIG.json`, or the bundle's
`entry.py _gateway [--await-config] CONFIG.json`; see service.py for what it publishes and how it stops.
"""
