"""Running a plan: the scheduler and its worker processes, the parent-child protocol, and the
flow of one case through the stages."""
