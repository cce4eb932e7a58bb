"""The bundled sweeps: package data of tiersim (``tiersim.sweeps``), found with ``tiersim.config.bundled``."""
