"""The control plane: render (pure), commands (the only Slurm caller), parse and observe (pure)."""
