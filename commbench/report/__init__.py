"""Reports, plots and the gate's tables: everything drawn from stored results, never in workers."""
