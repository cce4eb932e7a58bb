"""Subcommands of the ``tiersim`` CLI, one module each (see ``tiersim.cli``)."""
