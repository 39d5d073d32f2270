#!/usr/bin/env bash
# What a lent GPU needs to run issue 31's experiment in one call (experiments/ast_gpu.py):
# ast-bible.sh's data, tokenizer, configs and encoded training data (no training), a few
# general test sentences for the CUDA check of the served bundle, packed into
# runs/gpu-ast/work.tar.xz, and sacremoses with its dependencies as wheels for the device's
# Python 3.12 in runs/gpu-ast/wheels. Then, with the device tool (carry runs/gpu-ast):
#
#   pip install -q --no-index --find-links runs/gpu-ast/wheels sacremoses \
#     && tar xJf runs/gpu-ast/work.tar.xz -C /tmp \
#     && python experiments/ast_gpu.py --work /tmp/ast-work --out $OUT
#
# Settings as ast-bible.sh (BIBLE, LANGS, NT, EPOCHS, VOCAB, TEST_VERSES, SPM: full-width
# here, since every system trains anew there); DATA the prepared en-de data (for the CUDA
# check's sentences).
set -euo pipefail
BIBLE=${BIBLE:-data/bible}
DATA=${DATA:-data/en-de}
WORK=runs/ast-work
PACK=runs/gpu-ast
mkdir -p "$PACK"
WORK=$WORK SYSTEMS= SPM=${SPM:-full-width} bash "$(dirname "$0")/ast-bible.sh"
head -n 50 "$DATA/general/test.en" > "$WORK/general-test.en"
tar cJf "$PACK/work.tar.xz" -C runs --exclude "ast-work/spm-text" ast-work/data ast-work/spm.model \
  ast-work/configs ast-work/cache ast-work/general-test.en
pip download -q sacremoses --python-version 3.12 --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$PACK/wheels"
du -sh "$PACK"/*
