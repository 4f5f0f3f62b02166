"""Lethe's core library: datasets, models, unlearning methods, privacy accounting and verification.

Pure computation (torch, numpy, scipy): no web, queue or database imports.
"""

__version__ = "0.1.0"
