"""The command line and the GitHub Action's entry."""
