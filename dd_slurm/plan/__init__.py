"""The resolved plan: records, checks, fit, fields, strict JSON, io, placement. Empty on purpose:
`fields` runs on nodes from the bundle, standard library only."""
