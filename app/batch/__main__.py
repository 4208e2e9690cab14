"""``python -m app.batch ...`` and ``spark-submit app/batch/__main__.py ...``."""

import sys

from app.batch.cli import main

if __name__ == "__main__":
    sys.exit(main())
