"""The report writers: each reads a RunReport and nothing else, and gives the same bytes for it."""
