from dd_slurm.console import main

main()
