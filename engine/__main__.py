"""``python -m engine --model-path PATH --model-name NAME``: the engine service, no Django."""

import sys

from engine.service.cli import main

sys.exit(main())
