"""Diagnostics that work on any module: curvature, energy traces, orthogonality checks."""
