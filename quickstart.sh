#!/usr/bin/env bash
# The first command: install the requirements, then train a tiny model end to end (data/quickstart.py):
# on FineWeb sp1024 if it is in data/, otherwise on a dataset built from the Python standard library's
# documentation text. No download besides the packages; CPU or GPU. Options: bash quickstart.sh --help
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -r requirements.txt
python3 data/quickstart.py "$@"
