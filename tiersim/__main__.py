"""``python -m tiersim`` runs the CLI."""

import sys

from tiersim.cli import main

sys.exit(main())
