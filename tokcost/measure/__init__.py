"""Measure: a real PyTorch decode loop built from a ModelSpec, ceiling probes, and measured-vs-predicted.

The only package that imports torch, and only in its loop, model and probe modules (imported lazily).
"""
