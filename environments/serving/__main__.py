"""Entry point of environment server processes and containers."""

import sys

from environments.serving.run import main

sys.exit(main())
