"""tiersim: a discrete-event simulator of memory tiers for transformer training."""

__version__ = "0.1.0"
