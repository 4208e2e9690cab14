"""Downstream consumers of etj's output topics: examples of how to read a revision log right."""
