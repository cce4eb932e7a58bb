"""The bundled scenarios: package data of tiersim (``tiersim.scenarios``), found with ``tiersim.config.bundled``."""
