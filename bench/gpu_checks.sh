#!/usr/bin/env bash
# Every GPU figure still open, in one go, for a lent GPU machine (see BENCHMARKS.md):
#   bash bench/gpu_checks.sh            (writes each result to $OUT, or to gpu-results/)
# The CUDA tests first (short), then the benchmarks; each step is time-boxed so one slow step
# cannot eat the others' time.
set -u
out="${OUT:-gpu-results}"
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name" | tee -a "$out/summary.txt"
    timeout "$limit" "$@" > "$out/$name.txt" 2>&1
    echo "rc=$?" | tee -a "$out/summary.txt"
    tail -n 25 "$out/$name.txt" >> "$out/summary.txt"
}
step tests-cuda 150 python -m pytest -q -p no:cacheprovider tests/test_reliability.py tests/test_visualize.py -k cuda
step dataset 120 python bench/dataset_speed.py --device cuda --images 2048 --batch-size 256 --workers 8 --skip-peer
step dataset-bf16 120 python bench/dataset_speed.py --device cuda --images 2048 --batch-size 256 --workers 8 --skip-peer --bf16 --channels-last
step visualize 120 python bench/visualize_speed.py --device cuda
step bench 180 python bench/bench.py --device cuda
step batched-sessions 120 python bench/batched_sessions.py --device cuda --sessions 64 --model resnet50 --weights untrained
