# From the repository root; OUT: where the runs go (default /tmp/stall).
set -u
OUT=${OUT:-/tmp/stall}
mkdir -p "$OUT"
for rep in 1 2 3; do
  python3 scripts/bench_prefill_stall.py --nextn build-cuda/nextn --model models/default --streams 4 --chunks 64,512 --long-prompt 2000 -n 200 --lead 16 --json "$OUT"/off-$rep.json > "$OUT"/off-$rep.txt 2>"$OUT"/off-$rep.err
  python3 scripts/bench_prefill_stall.py --nextn build-cuda/nextn --model models/default --streams 4 --chunks 64,512 --long-prompt 2000 -n 200 --lead 16 --serve-args="--prefill-stall 2" --json "$OUT"/on-$rep.json > "$OUT"/on-$rep.txt 2>"$OUT"/on-$rep.err
done
