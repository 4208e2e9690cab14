"""Benchmarks: figures printed and written to ``bench/results/latest.json`` by ``python -m bench``.

Benchmarks measure; tests check behaviour. Nothing here asserts a timing: every module returns
its figures and declares the goals they are held to (:mod:`bench.harness`), and the runner
prints them. The benchmarks use the tests' harness, oracles, Kafka helpers and chaos run; no test
imports a benchmark (``tests/unit/test_import_direction.py``).
"""
