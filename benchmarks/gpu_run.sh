#!/usr/bin/env bash
# The GPU checks as one script, for a CUDA machine that has torch but may have no internet
# access: captum can be installed from wheels placed in .whl/, and without TensorFlow its rows
# are skipped (--backends torch).
#   bash benchmarks/gpu_run.sh [OUTPUT_DIR] [STEPS]
# STEPS: a comma-separated subset of precision,tests,targets,tracin,gradients,ism (default: all).
# Logs go to OUTPUT_DIR (default $OUT, else /tmp/seqattrib-gpu), one file per step.
set -o pipefail
out=${1:-${OUT:-/tmp/seqattrib-gpu}}
steps=${2:-precision,tests,targets,tracin,gradients,ism}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH" || exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
status=0
run() {  # run STEP SECONDS COMMAND...: log to $out/STEP.log, remember a failure
    local name=$1 seconds=$2
    shift 2
    [[ ",$steps," == *",$name,"* ]] || return 0
    echo "=== $name: $*"
    timeout "$seconds" "$@" 2>&1 | tee "$out/$name.log" || status=1
}
run precision 60 python3 benchmarks/gpu_precision.py
run tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
run targets 60 python3 benchmarks/bench_targets.py --device cuda --backends torch \
    --n-sequences 64 --batch-size 1024
run tracin 120 python3 benchmarks/bench_data_attribution.py --backends torch --device cuda
run gradients 280 python3 benchmarks/bench_gradients.py --device cuda --backends torch
run ism 150 python3 benchmarks/bench_ism.py --device cuda --backends torch --models none \
    --repeats 3
exit $status
