#!/usr/bin/env bash
# Issue 4's experiment, end to end and resumable (each stage skips what it already made):
# stores of every domain for every retrieval method, neighbours of the training pool, the
# CSTM model warm-started from the baseline, and every evaluation of the report.
#
#   bash docs/experiments/semiparametric-en-de.sh
#
# Settings (environment): DATA prepared corpora; BASE the baseline bundle; WORK output dir;
# TRAIN_METHOD the retrieval the memory model trains on; CONFIG its training config; HOURS or
# STEPS its budget; K neighbours per sentence at evaluation; DENSE_INDEX the FAISS factory of
# the dense stores and DENSE_SEARCH its search parameters (Flat on the full pool is ~4 GB and
# slow to search; SQ8 codes are 4x smaller; PQ64x4fs recalled only 0.58-0.72 of the exact
# top 10). Results: $WORK/report.md and the
# JSON/Markdown of every evaluation under $WORK/eval/.
set -euo pipefail
DATA=${DATA:-data/en-de}
BASE=${BASE:-models/default_bundle}
WORK=${WORK:-runs/semiparametric}
TRAIN_METHOD=${TRAIN_METHOD:-dense-ngram}
CONFIG=${CONFIG:-models/configs/semiparametric-en-de.json}
HOURS=${HOURS:-1.5}
STEPS=${STEPS:-}
K=${K:-10}
DENSE_INDEX=${DENSE_INDEX:-IVF1024,SQ8}
DENSE_SEARCH=${DENSE_SEARCH-nprobe=16}  # empty: none
DOMAINS=${DOMAINS:-general bible medical software-docs}
METHODS=${METHODS:-idf-sentence idf-ngram dense-ngram}
STORES=$WORK/stores
EVAL=$WORK/eval
MODEL=$WORK/cstm-$TRAIN_METHOD
mkdir -p "$EVAL"
csv() { echo "$*" | tr ' ' ','; }

echo "== 1. stores: each domain's train split, each method"
for m in $METHODS; do
  for d in $DOMAINS; do
    [ -f "$STORES/$m/$d/ACTIVE" ] && continue
    extra=()
    if [ "$m" = dense-ngram ]; then
      extra=(--model "$BASE" --index "$DENSE_INDEX")
      [ -n "$DENSE_SEARCH" ] && extra+=(--search "$DENSE_SEARCH")
    fi
    ragmt build-store --domain "$d" --corpus "$DATA/$d" --split train --method "$m" \
      --out "$STORES/$m" "${extra[@]}"
  done
done

echo "== 2. neighbours of the pool (general): train without itself, dev"
NB=$WORK/neighbours/$TRAIN_METHOD
mkdir -p "$NB"
[ -f "$NB/train.jsonl" ] || ragmt neighbours --store "$STORES/$TRAIN_METHOD/general" \
  --input "$DATA/general" --split train --exclude-self --k "$K" --out "$NB/train.jsonl"
[ -f "$NB/dev.jsonl" ] || ragmt neighbours --store "$STORES/$TRAIN_METHOD/general" \
  --input "$DATA/general" --split dev --k "$K" --out "$NB/dev.jsonl"

echo "== 3. the CSTM model, warm-started from $BASE"
budget=(--max-hours "$HOURS")
[ -n "$STEPS" ] && budget=(--max-steps "$STEPS")
[ -f "$MODEL/manifest.json" ] || ragmt train --data "$DATA" --config "$CONFIG" --init "$BASE" \
  --train-neighbours "$NB/train.jsonl" --dev-neighbours "$NB/dev.jsonl" \
  --run "$WORK/run-cstm-$TRAIN_METHOD" --out "$MODEL" "${budget[@]}"

echo "== 4. evaluation"
run_eval() {  # name, then ragmt eval options
  local name=$1
  shift
  [ -f "$EVAL/$name.json" ] || ragmt eval --data "$DATA" --neighbours "$K" \
    --out "$EVAL/$name" --title "$name" "$@"
}
run_eval baseline --model "$BASE" --domains "$(csv $DOMAINS)"
for m in $METHODS; do  # non-parametric adaptation: each domain with its own store
  run_eval "cstm-$TRAIN_METHOD+$m" --model "$MODEL" --stores "$STORES/$m" --domains "$(csv $DOMAINS)"
done
adapt=$(echo $DOMAINS | tr ' ' '\n' | grep -v '^general$' | tr '\n' ' ')
for d in $adapt; do  # robustness: every other domain translated with $d's (wrong) store
  others=$(echo $DOMAINS | tr ' ' '\n' | grep -v "^$d\$" | tr '\n' ' ')
  run_eval "cstm-$TRAIN_METHOD+$TRAIN_METHOD-store-$d" --model "$MODEL" \
    --stores "$STORES/$TRAIN_METHOD" --store "$d" --domains "$(csv $others)"
done

echo "== 5. report"
python - "$EVAL" "$WORK/report.md" <<'PY'
import json
import sys
from pathlib import Path

ev, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = {p.stem: json.loads(p.read_text()) for p in sorted(ev.glob("*.json"))}
base = runs.get("baseline", {})
lines = ["| system | domain | store | BLEU | Δ baseline | chrF | mean gate |",
         "|---|---|---|---:|---:|---:|---:|"]
for name, res in runs.items():
    for domain, r in res.items():
        delta = r["bleu"] - base[domain]["bleu"] if domain in base else float("nan")
        gate = f"{r['gate_mean']:.3f}" if "gate_mean" in r else "-"
        lines.append(f"| {name} | {domain} | {r.get('store', '-')} | {r['bleu']:.2f} | "
                     f"{delta:+.2f} | {r['chrf']:.2f} | {gate} |")
first = next(iter(next(iter(runs.values())).values()))
lines += ["", f"BLEU: `{first['bleu_signature']}`", f"chrF: `{first['chrf_signature']}`"]
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
PY
