"""Spec → cases with stable, readable ids; selection; shards."""
