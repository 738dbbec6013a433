"""`python -m benchmarks.corpus [NAME ...]`: fetch the real-model corpus (see benchmarks/corpus/__init__.py)."""

import sys

from benchmarks.corpus import main

sys.exit(main(sys.argv[1:]))
