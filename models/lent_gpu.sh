#!/bin/bash
# Issue 18's Transformers on a lent GPU: train prepared runs side by side, score each as it ends,
# pack the best per direction into $OUT. Here, first:
#   for r in en-zh-guided zh-en-guided en-zh-joint zh-en-joint; do
#     attention-mt train models/configs/transformer-$r.toml --out .gpu/runs/$r --prepare-only; done
#   mkdir -p .gpu/data && cp ../shared/data/*/{cmn-eng,news-zh-en}.tsv .gpu/data/
#   (cd .gpu && tar czf prep.tar.gz data runs)   # and sentencex's cp312 wheel into .whl/
# There (repo root; carry .gpu/prep.tar.gz and .whl):
#   bash models/lent_gpu.sh 5.75 en-zh-guided zh-en-guided en-zh-joint zh-en-joint
# Here, afterwards: python -m models.lent_gpu unpack DIR LABEL runs/RUN/best.pt
set -u
minutes=$1; shift
tar xzf .gpu/prep.tar.gz -C .gpu
if ls .whl/*.whl >/dev/null 2>&1; then  # what the machine's image lacks (sentencex)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
fi
export ATTENTION_MT_CORPUS=$PWD/.gpu/data/cmn-eng.tsv ATTENTION_MT_REAL_TEXT=$PWD/.gpu/data/news-zh-en.tsv
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/logs/gpu.txt" 2>&1
threads=$(( $(nproc) / $# ))
for run in "$@"; do
  ( timeout $(( ${minutes%.*} * 60 + 120 )) python3 -m models.lent_gpu train "$run" "$minutes" "$threads" \
      > "$OUT/logs/$run.log" 2>&1
    python3 -m models.lent_gpu score "$run" > "$OUT/logs/$run.score.log" 2>&1
    cp ".gpu/runs/$run/history.jsonl" "$OUT/logs/$run.history.jsonl" ) &
done
wait
python3 -m models.lent_gpu pack "$OUT" "$@" 2>&1 | tee "$OUT/logs/pack.log"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -r "$OUT/logs"
