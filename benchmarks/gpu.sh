#!/usr/bin/env bash
# On a machine with a GPU: decoding and FAISS on CUDA against CPU, side by side; the output
# goes to docs/gpu-benchmarks.md (commit it). Needs the `gpu` extra (faiss-gpu) for FAISS.
#   bash benchmarks/gpu.sh [--model BUNDLE] [--data data/en-de]
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/gpu-benchmarks.md
trap 'rm -f "$out.tmp"' EXIT
{
  echo "# GPU benchmarks"
  echo
  echo "\`bash benchmarks/gpu.sh $*\` on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  python -m benchmarks.gpu "$@"
  echo '```'
} | tee "$out.tmp"
mv "$out.tmp" "$out"
