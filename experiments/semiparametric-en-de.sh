#!/usr/bin/env bash
# Issue 4's experiment, end to end and resumable (each stage skips what it already made):
# stores of every domain for every retrieval method, neighbours of the training pool, the
# CSTM model warm-started from the baseline, dense stores of its own encoder, every evaluation,
# the fine-tuned systems, the CTM/TM ablations and the report.
#
#   bash experiments/semiparametric-en-de.sh
#
# Settings (environment): DATA prepared corpora; BASE the baseline bundle; INIT the bundle the
# memory model starts from (default BASE; a memory model's bundle continues it); WORK output dir;
# TRAIN_METHOD the retrieval the memory model trains on; CONFIG its training config; HOURS or
# STEPS its budget; K neighbours per pool sentence precomputed for training; NB_SHARDS
# processes that compute them at once; EVAL_K neighbours retrieved per sentence at
# evaluation; DENSE_INDEX the FAISS factory of the dense stores, DENSE_SEARCH its search
# parameters and DENSE_RECALL the recall@10 the build deepens the search to (Flat on the full
# pool is ~4 GB and slow to search; SQ8 codes are 4x smaller; PQ64x4fs recalled only
# 0.58-0.72 of the exact top 10; nprobe=16 alone 0.87-0.92); ROBUST the mismatched stores, as
# domain:store pairs; FT_HOURS or FT_STEPS the fine-tuning budget per adaptation domain and
# FT_SYSTEMS which systems are fine-tuned ("baseline cstm", empty: none); ABLATIONS the memory
# modes trained at one smaller, equal budget ("cstm ctm tm", empty: none) with ABLATION_HOURS
# or ABLATION_STEPS,
# evaluated with ABLATION_METHOD's stores on ABLATION_DOMAINS (default: all DOMAINS). Results: $WORK/report.md (written by
# experiments/semiparametric_report.py), every evaluation's record in $WORK/results.jsonl (for
# `ragmt report`), and its JSON/Markdown, the hypotheses and the neighbours each sentence read
# under $WORK/eval/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-data/en-de}
BASE=${BASE:-models/baseline_bundle}
INIT=${INIT:-$BASE}  # what stage 3 starts from: the baseline (warm start) or a memory model (run 3)
WORK=${WORK:-runs/semiparametric}
TRAIN_METHOD=${TRAIN_METHOD:-idf-ngram}
CONFIG=${CONFIG:-models/configs/semiparametric-en-de.json}
HOURS=${HOURS:-1.5}
STEPS=${STEPS:-}
K=${K:-10}
NB_SHARDS=${NB_SHARDS:-2}
EVAL_K=${EVAL_K:-5}
DENSE_INDEX=${DENSE_INDEX:-IVF1024,SQ8}
DENSE_SEARCH=${DENSE_SEARCH-nprobe=16}  # empty: none; the starting depth with DENSE_RECALL
DENSE_RECALL=${DENSE_RECALL-0.95}  # recall@10 approximate dense stores are built to (empty: fixed)
DOMAINS=${DOMAINS:-general bible medical software-docs}
METHODS=${METHODS:-idf-sentence idf-ngram dense-ngram}
ROBUST=${ROBUST:-bible:medical medical:software-docs software-docs:bible general:medical}
FT_HOURS=${FT_HOURS:-0.1}
FT_STEPS=${FT_STEPS:-}
FT_SYSTEMS=${FT_SYSTEMS-baseline cstm}
ABLATIONS=${ABLATIONS-cstm ctm tm}
ABLATION_HOURS=${ABLATION_HOURS:-0.25}
ABLATION_STEPS=${ABLATION_STEPS:-}
ABLATION_METHOD=${ABLATION_METHOD:-dense-ngram}
ABLATION_DOMAINS=${ABLATION_DOMAINS:-$DOMAINS}
STORES=$WORK/stores
EVAL=$WORK/eval
NB=$WORK/neighbours/$TRAIN_METHOD
MODEL=$WORK/cstm-$TRAIN_METHOD
mkdir -p "$EVAL" "$NB"
csv() { echo "$*" | tr ' ' ','; }
adapt=$(echo $DOMAINS | tr ' ' '\n' | grep -v '^general$' | tr '\n' ' ')
budget() {  # hours, steps -> ragmt train budget options
  if [ -n "$2" ]; then echo --max-steps "$2"; else echo --max-hours "$1"; fi
}
derive() {  # training config from a source (config file or bundle), out file, JSON overrides
  python - "$@" <<'PY'
import json
import sys
from pathlib import Path

src, out, overrides = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
cfg = json.loads(((src / "manifest.json") if src.is_dir() else src).read_text())
cfg = cfg["training"]["config"] if src.is_dir() else cfg
model = {**cfg.get("model", {}), **overrides.pop("model", {})}
out.write_text(json.dumps({**cfg, **overrides, "model": model}, indent=2) + "\n")
PY
}
neighbours() {  # store domain, corpus domain, split, out, extra options: NB_SHARDS at once
  local store=$1 corpus=$2 split=$3 out=$4
  shift 4
  [ -f "$out" ] && return
  local pids=() i
  for i in $(seq 1 "$NB_SHARDS"); do
    ragmt neighbours --store "$STORES/$TRAIN_METHOD/$store" --input "$DATA/$corpus" \
      --split "$split" --k "$K" --shard "$i/$NB_SHARDS" --out "$out.part$i" "$@" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  for i in $(seq 1 "$NB_SHARDS"); do cat "$out.part$i"; done > "$out.tmp"
  mv "$out.tmp" "$out" && rm -f "$out".part*
}
run_eval() {  # name, then ragmt eval options
  local name=$1
  shift
  [ -f "$EVAL/$name.json" ] || ragmt eval --data "$DATA" --neighbours "$EVAL_K" \
    --out "$EVAL/$name" --title "$name" --results "$WORK/results.jsonl" --system "${name%%+*}" "$@"
}

build_stores() {  # method, stores dir, encoder bundle (dense): every domain's train split
  local m=$1 dir=$2 d extra
  for d in $DOMAINS; do
    [ -f "$dir/$d/ACTIVE" ] && continue
    extra=()
    if [ "$m" = dense-ngram ]; then
      extra=(--model "$3" --index "$DENSE_INDEX")
      [ -n "$DENSE_SEARCH" ] && extra+=(--search "$DENSE_SEARCH")
      [ -n "$DENSE_RECALL" ] && [ "$DENSE_INDEX" != Flat ] && extra+=(--target-recall "$DENSE_RECALL")
    fi
    ragmt build-store --domain "$d" --corpus "$DATA/$d" --split train --method "$m" \
      --out "$dir" "${extra[@]}"
  done
}

echo "== 1. stores: each domain's train split, each method (dense: the baseline's encoder)"
for m in $METHODS; do
  build_stores "$m" "$STORES/$m" "$BASE"
done

echo "== 2. neighbours of the pool (general): train without itself, dev"
neighbours general general train "$NB/train.jsonl" --exclude-self
neighbours general general dev "$NB/dev.jsonl"

echo "== 3. the CSTM model, started from $INIT"
[ -f "$MODEL/manifest.json" ] || ragmt train --data "$DATA" --config "$CONFIG" --init "$INIT" \
  --train-neighbours "$NB/train.jsonl" --dev-neighbours "$NB/dev.jsonl" \
  --run "$WORK/run-cstm-$TRAIN_METHOD" --out "$MODEL" $(budget "$HOURS" "$STEPS")

echo "== 4. evaluation"
run_eval baseline --model "$BASE" --domains "$(csv $DOMAINS)"
for m in $METHODS; do  # non-parametric adaptation: each domain with its own store
  run_eval "cstm-$TRAIN_METHOD+$m" --model "$MODEL" --stores "$STORES/$m" --domains "$(csv $DOMAINS)"
done
if [[ " $METHODS " == *" dense-ngram "* ]]; then
  # Dense stores as the service builds them: vectors of the served (memory) model's own
  # encoder, which lets it encode a query once for retrieval and decoding.
  build_stores dense-ngram "$STORES/dense-own" "$MODEL"
  run_eval "cstm-$TRAIN_METHOD+dense-own" --model "$MODEL" --stores "$STORES/dense-own" \
    --domains "$(csv $DOMAINS)"
fi
for pair in $ROBUST; do  # robustness: a domain translated with another domain's store
  d=${pair%%:*} s=${pair##*:}
  run_eval "cstm-$TRAIN_METHOD+$TRAIN_METHOD-store-$s-on-$d" --model "$MODEL" \
    --stores "$STORES/$TRAIN_METHOD" --store "$s" --domains "$d"
done

echo "== 5. fine-tuning on each adaptation domain's train split (the parametric alternative)"
ft='{"lr": 0.0003, "warmup": 50, "eval_every": 1000000, "save_every": 50,
     "keep_checkpoints": 3, "average_last": 2}'
for d in $adapt; do
  for sys in $FT_SYSTEMS; do
    if [ "$sys" = baseline ]; then from=$BASE; else from=$MODEL; fi
    out=$WORK/ft-$sys-$d
    nbopts=() evalopts=()
    if [ "$sys" != baseline ]; then  # the memory model fine-tunes on its domain's neighbours
      neighbours "$d" "$d" train "$WORK/neighbours/ft-$d/train.jsonl" --exclude-self
      neighbours "$d" "$d" dev "$WORK/neighbours/ft-$d/dev.jsonl"
      nbopts=(--train-neighbours "$WORK/neighbours/ft-$d/train.jsonl"
        --dev-neighbours "$WORK/neighbours/ft-$d/dev.jsonl")
      evalopts=(--stores "$STORES/$TRAIN_METHOD")
    fi
    if [ ! -f "$out/manifest.json" ]; then
      derive "$from" "$WORK/ft-$sys.json" "$ft"
      ragmt train --data "$DATA" --domain "$d" --config "$WORK/ft-$sys.json" --init "$from" \
        "${nbopts[@]}" --run "$WORK/run-ft-$sys-$d" --out "$out" $(budget "$FT_HOURS" "$FT_STEPS")
    fi
    run_eval "ft-$sys-$d" --model "$out" --domains "$d" "${evalopts[@]}"
  done
done

echo "== 6. ablations: the memory modes $ABLATIONS, evaluated with $ABLATION_METHOD stores"
for mode in $ABLATIONS; do
  out=$WORK/ablation-$mode-$TRAIN_METHOD
  if [ ! -f "$out/manifest.json" ]; then
    derive "$CONFIG" "$WORK/$mode.json" "{\"model\": {\"memory_mode\": \"$mode\"}}"
    ragmt train --data "$DATA" --config "$WORK/$mode.json" --init "$BASE" \
      --train-neighbours "$NB/train.jsonl" --dev-neighbours "$NB/dev.jsonl" \
      --run "$WORK/run-ablation-$mode-$TRAIN_METHOD" --out "$out" $(budget "$ABLATION_HOURS" "$ABLATION_STEPS")
  fi
  run_eval "ablation-$mode-$TRAIN_METHOD+$ABLATION_METHOD" --model "$out" \
    --stores "$STORES/$ABLATION_METHOD" --domains "$(csv $ABLATION_DOMAINS)"
done

echo "== 7. report"
python "$HERE/semiparametric_report.py" --eval "$EVAL" --data "$DATA" \
  --baseline baseline --system "cstm-$TRAIN_METHOD+$TRAIN_METHOD" --out "$WORK/report.md"
