"""Test infrastructure shipped in the bundle: fake model server, fake client, fake Slurm."""
