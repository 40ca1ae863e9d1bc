#!/usr/bin/env bash
# The first command: install the requirements, then train a tiny model end to end (data/quickstart.py):
# on FineWeb sp1024 if it is in data/, otherwise on a dataset built from the Python standard library's
# documentation text. No download besides the packages; CPU or GPU. Options: bash quickstart.sh --help
set -euo pipefail
cd "$(dirname "$0")"

usage() {
    cat <<'EOF'
usage: bash quickstart.sh [--data {auto,fineweb,stdlib}] [--seconds S] [--rebuild] [--workers N]

Installs requirements.txt (on a machine without a GPU, the CPU build of torch first, so that pip
does not fetch the CUDA build), then runs data/quickstart.py with these options:
  --data       auto: FineWeb sp1024 when it is in data/, else the standard-library text (default auto)
  --seconds    training wallclock cap, MAX_WALLCLOCK_SECONDS (default 120)
  --rebuild    rebuild the standard-library dataset
  --workers    encoding processes (default: all cores)
With the requirements installed, python3 data/quickstart.py takes the same options.
EOF
}

for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
    esac
done

# pip resolves plain "torch" to the CUDA build with about 15 nvidia-* packages (gigabytes). Without
# a GPU, install the CPU build from the PyTorch CPU index first; where that index cannot be reached,
# requirements.txt below installs torch from the default index.
if ! python3 -c "import torch" >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "quickstart: no GPU (no nvidia-smi): installing the CPU build of torch first"
    if ! python3 -m pip install torch --index-url https://download.pytorch.org/whl/cpu; then
        echo "quickstart: the PyTorch CPU index did not answer; installing torch from the default index"
    fi
fi
python3 -m pip install -r requirements.txt
python3 data/quickstart.py "$@"
