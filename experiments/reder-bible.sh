#!/usr/bin/env bash
# Issue 29's Bible-tier experiment (SEEDS.md §3.3), end to end and resumable (each stage skips
# what it already made): the two autoregressive teachers (English->German, German->English),
# their beam-4 distillation of the training verses, REDER variants at an equal number of
# updates, and every evaluation in both directions, recorded for `ragmt report`.
#
#   bash experiments/reder-bible.sh
#
# Variants: duplex (distilled, with the agreement and cycle losses: the recipe), duplex-noaux
# (distilled, without them), duplex-raw (the raw verses, with them), the two simplex models
# forward / backward (distilled, one direction each, as many updates each), and mtl, the
# multitask baseline (`reder-mtl`: REDER's sublayers in one non-reversible CTC encoder told the
# target language, distilled, CTC alone).
#
# Settings (environment): DATA prepared corpora; WORK output dir; TEACHER and REDER the
# training configs; STEPS overrides REDER's max_steps (aux_after stays at 60% of it) for a
# quick pass; VARIANTS which variants run; VOCAB the joint SentencePiece vocabulary. Results: $WORK/results.jsonl (one record per
# model, direction and test set), the bundles under $WORK/<name>/bundle.
set -euo pipefail
DATA=${DATA:-data/en-de}
WORK=${WORK:-runs/reder-bible}
TEACHER=${TEACHER:-models/configs/transformer-bible-teacher.json}
REDER=${REDER:-models/configs/reder-small-en-de.json}
STEPS=${STEPS:-}
VARIANTS=${VARIANTS:-duplex duplex-noaux duplex-raw forward backward mtl}
VOCAB=${VOCAB:-8000}  # each run's joint SentencePiece vocabulary
RESULTS=$WORK/results.jsonl
mkdir -p "$WORK/kd" "$WORK/configs" "$WORK/eval"

# 1. The teachers: the baseline's Transformer on the Bible verses, one per direction.
for dir in en-de de-en; do
  [ -f "$WORK/teacher-$dir/bundle/manifest.json" ] && continue
  ragmt train --data "$DATA" --domain bible --source-lang "${dir%-*}" --config "$TEACHER" \
    --vocab-size "$VOCAB" --run "$WORK/teacher-$dir" --out "$WORK/teacher-$dir/bundle"
done

# 2. Distillation: each teacher's beam-4 translation of the training sources of its direction.
distil() {  # teacher direction, source file, output file
  [ -f "$3" ] && return
  ragmt translate --model "$WORK/teacher-$1/bundle" --beam 4 -i "$2" -o "$3.part"
  mv "$3.part" "$3"
}
distil en-de "$DATA/bible/train.en" "$WORK/kd/train.de"
distil de-en "$DATA/bible/train.de" "$WORK/kd/train.en"

# 3. REDER variants, every one at the same number of updates.
config() {  # name, then key=json-value overrides of the REDER config
  local name=$1; shift
  python - "$REDER" "$WORK/configs/$name.json" "$STEPS" "$@" <<'PY'
import json, sys
base, out, steps, *pairs = sys.argv[1:]
cfg = json.load(open(base))
if steps:
    cfg["max_steps"] = int(steps)
    cfg["aux_after"] = int(0.6 * int(steps))
for pair in pairs:
    key, value = pair.split("=", 1)
    cfg[key] = json.loads(value)
json.dump(cfg, open(out, "w"), indent=2)
PY
}
train_variant() {  # name, kd (yes/no), config overrides...
  local name=$1 kd=$2; shift 2
  [ -f "$WORK/$name/bundle/manifest.json" ] && return
  config "$name" "$@"
  local extra=()
  [ "$kd" = yes ] && extra=(--kd-forward "$WORK/kd/train.de" --kd-backward "$WORK/kd/train.en")
  ragmt train --data "$DATA" --domain bible --config "$WORK/configs/$name.json" \
    --vocab-size "$VOCAB" --run "$WORK/$name" --out "$WORK/$name/bundle" "${extra[@]}"
}
for v in $VARIANTS; do
  case $v in
    duplex) train_variant duplex yes ;;
    duplex-noaux) train_variant duplex-noaux yes fba_weight=0 cc_weight=0 ;;
    duplex-raw) train_variant duplex-raw no ;;
    forward) train_variant forward yes 'directions="forward"' ;;
    backward) train_variant backward yes 'directions="backward"' ;;
    mtl) train_variant mtl yes 'arch="reder-mtl"' fba_weight=0 cc_weight=0 aux_after=0 ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
  esac
done

# 4. Every model on the Bible test verses, in each direction it translates.
evaluate() {  # system name, bundle, source language
  local mark="$WORK/eval/$1.$3.done"
  [ -f "$mark" ] && return
  ragmt eval --model "$2" --data "$DATA" --domains bible --source-lang "$3" --beam 4 \
    --results "$RESULTS" --system "$1" --out "$WORK/eval/$1.$3"
  touch "$mark"
}
evaluate teacher "$WORK/teacher-en-de/bundle" en
evaluate teacher "$WORK/teacher-de-en/bundle" de
for v in $VARIANTS; do
  case $v in
    forward) evaluate "$v" "$WORK/$v/bundle" en ;;
    backward) evaluate "$v" "$WORK/$v/bundle" de ;;
    *) evaluate "$v" "$WORK/$v/bundle" en; evaluate "$v" "$WORK/$v/bundle" de ;;
  esac
done
echo "results: $RESULTS"
