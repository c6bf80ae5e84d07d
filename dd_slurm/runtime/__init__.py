"""Inside the allocation: verify, launch, supervise, probe, publish, validate, clean up."""
