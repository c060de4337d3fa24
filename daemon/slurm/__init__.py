"""Slurm's commands (sbatch, srun, scancel, squeue, sacct, sinfo, scontrol) for the single-node jobs
reckon runs, on the blocking client (daemon/blocking/).  One light module per command."""
