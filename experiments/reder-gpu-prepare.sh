#!/usr/bin/env bash
# What a lent GPU needs to train the served REDER in one call (experiments/reder_gpu.py): the
# prepared en-de data (general train/dev and every domain's test set) packed into
# runs/gpu-reder/work.tar.xz, and sacremoses with its dependencies as wheels for the device's
# Python 3.12 in runs/gpu-reder/wheels. The teachers travel with the working tree (the
# committed baseline, and the de->en teacher given to reder_gpu.py). Then, with the device
# tool (carry runs/gpu-reder):
#
#   pip install -q --no-index --find-links runs/gpu-reder/wheels sacremoses \
#     && tar xJf runs/gpu-reder/work.tar.xz -C /tmp \
#     && python experiments/reder_gpu.py --work /tmp/reder-work --teacher-de-en TEACHER \
#          --minutes 5 --out $OUT
#
# DATA: the prepared en-de data (`ragmt data prepare`).
set -euo pipefail
DATA=${DATA:-data/en-de}
PACK=runs/gpu-reder
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$PACK" "$STAGE/reder-work/data"
cp "$DATA/manifest.json" "$STAGE/reder-work/data/"
for domain in general bible medical software-docs; do
  mkdir -p "$STAGE/reder-work/data/$domain"
  splits="test"
  [ "$domain" = general ] && splits="train dev test"
  for split in $splits; do
    cp "$DATA/$domain/$split.en" "$DATA/$domain/$split.de" "$STAGE/reder-work/data/$domain/"
  done
done
tar cJf "$PACK/work.tar.xz" -C "$STAGE" reder-work
pip download -q sacremoses --python-version 3.12 --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$PACK/wheels"
du -sh "$PACK"/*
