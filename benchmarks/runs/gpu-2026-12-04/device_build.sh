#!/usr/bin/env bash
# On the GPU machine (device tool, carry .gpu/a), from the repository root: build llama-cpp-python
# 0.3.36 with CUDA for the H200 (sm_90) into /tmp/site, then time the coder pair's stand-ins
# (bundle.sh) with every layer of both models on the GPU. Output: $OUT/build.log, coder_bench.txt,
# coder_generate.jsonl, and the built wheel in pieces (wheel.partN, 15 MiB each, at most 4) so that a later
# call can install it instead of building again (join with cat, carry it, pip install it).
# (acceptance_traces.py --costs-only segfaulted here on 2026-12-04 before printing; it is left out.)
set -u
repo=$PWD
exec > >(tee "$OUT/build.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nproc
python3 --version; nvcc --version | tail -1
mkdir -p /tmp/b /tmp/site /tmp/m /tmp/spc
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/a/whl/*.whl
tar xJf .gpu/a/lcp.tar.xz -C /tmp/b
cp .gpu/a/demo-draft.part0 /tmp/m/
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=OFF -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=ON"
export CMAKE_BUILD_PARALLEL_LEVEL=16
t0=$(date +%s)
timeout "${BUILD_LIMIT:-400}" python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w /tmp/whl \
  --config-settings=build-dir=/tmp/b/build /tmp/b/llama_cpp_python-0.3.36 > /tmp/b/pip.log 2>&1
rc=$?; echo "build rc $rc after $(( $(date +%s) - t0 )) s"; [ $rc = 0 ] || { tail -40 /tmp/b/pip.log; exit 1; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/whl/llama_cpp_python-*.whl
export PYTHONPATH=/tmp/site:$repo
python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload', llama_cpp.llama_supports_gpu_offload())"
whl=$(ls /tmp/whl/llama_cpp_python-*.whl); ls -la "$whl"; sha256sum "$whl"
if [ "$(stat -c %s "$whl")" -le $((60 * 1024 * 1024)) ]; then split -b 15M -d -a 1 "$whl" "$OUT/wheel.part"; fi
for x in coder-target coder-draft; do
  xz -dc ".gpu/a/$x.head.xz" > "/tmp/m/$x.gguf" && truncate -s "$(cat .gpu/a/$x.size)" "/tmp/m/$x.gguf"
done
T=/tmp/m/coder-target.gguf D=/tmp/m/coder-draft.gguf
cd /tmp
export SPECLLAMA_CACHE=/tmp/spc
fresh() { rm -f /tmp/costs.json; echo '{}' > /tmp/costs.json; export SPECLLAMA_COSTS_FILE=/tmp/costs.json; }
fresh; timeout 150 python3 -m specllama bench -m $T -md $D -ngl 99 -ngld 99 --temp 0 -n 128 --only story,code \
  > "$OUT/coder_bench.txt" 2>&1; echo "bench rc $?"; tail -25 "$OUT/coder_bench.txt"
for cfg in "target-only:--draft-max 0" "default:" "k=2:--draft-fixed --draft-max 2" "k=4:--draft-fixed --draft-max 4" \
           "k=8:--draft-fixed --draft-max 8" "target-only:--draft-max 0" "default:"; do
  fresh; timeout 60 python3 -m specllama generate -m $T -md $D -ngl 99 -ngld 99 -p "def merge_intervals(intervals):" \
    -n 256 --temp 0 --seed 1 --ignore-eos --json ${cfg#*:} 2>/dev/null \
  | python3 -c "import json,sys; d=json.load(sys.stdin); [d.pop(k) for k in ('tokens','origins','text')]; print(json.dumps({'config': sys.argv[1], **d}))" "${cfg%%:*}" \
  | tee -a "$OUT/coder_generate.jsonl" | cut -c1-300
done
date -u
