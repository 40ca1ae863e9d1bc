#!/usr/bin/env bash
# The first command: install the requirements, then train a tiny model end to end (data/quickstart.py):
# on FineWeb sp1024 if it is in data/, otherwise on a dataset built from the Python standard library's
# documentation text. No download besides the packages; CPU or GPU. Options: bash quickstart.sh --help
set -euo pipefail
cd "$(dirname "$0")"

usage() {
    cat <<'EOF'
usage: bash quickstart.sh [--data {auto,fineweb,stdlib}] [--seconds S] [--rebuild] [--workers N] [--check]

Installs requirements.txt (on a machine without a GPU, the CPU build of torch first, so that pip
does not fetch the CUDA build, from QUICKSTART_TORCH_INDEX if set, else the PyTorch CPU index; where
that fails, it says so before pip takes torch from the default index: on Linux the CUDA build),
then runs data/quickstart.py with these options:
  --data       auto: FineWeb sp1024 when it is in data/, else the standard-library text (default auto)
  --seconds    training wallclock cap, MAX_WALLCLOCK_SECONDS (default 120)
  --rebuild    rebuild the standard-library dataset
  --workers    encoding processes, at least 1 (default: all cores)
  --check      check the options and stop (every run checks them first, before it installs anything)
With the requirements installed, python3 data/quickstart.py takes the same options.
EOF
}

check_only=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --check) check_only=1 ;;
    esac
done
# The options are checked before anything is installed: quickstart.py's parser needs only the standard library.
python3 data/quickstart.py --check "$@"
if [ "$check_only" = 1 ]; then
    exit 0
fi

# pip resolves plain "torch" to the CUDA build with about 15 nvidia-* packages (gigabytes). Without
# a GPU, install the CPU build from the PyTorch CPU index first; where that fails, requirements.txt below
# installs torch from the default index, and warn_cuda_torch says so first. The index is asked first, for at most
# INDEX_TIMEOUT_SECONDS: pip alone retries a silent index for every package's page (minutes), and then
# succeeds anyway where its configuration names other sources (find-links, extra-index-url), so its
# exit status cannot say whether the index answered. QUICKSTART_TORCH_INDEX names another index (a mirror).
TORCH_CPU_INDEX="${QUICKSTART_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
INDEX_TIMEOUT_SECONDS=10
# Exits 0 when the URL argv[1] answers within argv[2] seconds; otherwise prints why and exits 1.
INDEX_PROBE='import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).close()
except (OSError, ValueError) as exc:
    sys.exit(str(exc))'

# Returns 1 where the CPU build could not be installed: then requirements.txt brings torch from the default index.
install_cpu_torch() {
    local reason
    if ! reason=$(python3 -c "$INDEX_PROBE" "${TORCH_CPU_INDEX%/}/torch/" "$INDEX_TIMEOUT_SECONDS" 2>&1); then
        echo "quickstart: the PyTorch CPU index $TORCH_CPU_INDEX did not answer ($reason);" \
             "installing torch from the default index"
        return 1
    fi
    if ! python3 -m pip install torch --index-url "$TORCH_CPU_INDEX" \
            --timeout "$INDEX_TIMEOUT_SECONDS" --retries 1; then
        echo "quickstart: pip could not install torch from the PyTorch CPU index $TORCH_CPU_INDEX (its messages" \
             "are above); installing torch from the default index"
        return 1
    fi
}

# Said before pip starts: the default index's torch is, on Linux, the CUDA build, gigabytes this machine cannot use.
warn_cuda_torch() {
    echo "quickstart: warning: torch from the default index is, on Linux, the CUDA build: about 15 nvidia-*" \
         "packages, gigabytes, that a machine without a GPU does not use. To avoid it, stop it (Ctrl-C)," \
         "set QUICKSTART_TORCH_INDEX to a PyTorch CPU index that answers here (a mirror of" \
         "https://download.pytorch.org/whl/cpu), or install a CPU build of torch yourself, and run bash quickstart.sh" \
         "again."
}

if ! python3 -c "import torch" >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "quickstart: no GPU (no nvidia-smi): installing the CPU build of torch first"
    install_cpu_torch || warn_cuda_torch
fi
python3 -m pip install -r requirements.txt
python3 data/quickstart.py "$@"
