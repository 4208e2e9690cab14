"""Benchmarks: figures printed and written to ``bench/results/latest.json`` by ``python -m bench``.

Benchmarks measure; tests check behaviour. Nothing here asserts a timing: every module returns
its figures (and the goal they are compared with) and the runner prints them.
"""
