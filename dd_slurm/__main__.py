from dd_slurm.cli import main

main()
