"""The bundled device profiles: package data of tiersim (``tiersim.device_profiles``), found
with ``tiersim.config.bundled``."""
