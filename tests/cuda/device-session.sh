#!/bin/sh
# device-session.sh: what one call on the lent GPU machine runs (see
# docs/performance.md): binaries built here are carried in build/h7 (minke,
# tests/cuda/*, and the shared libraries the device image lacks in lib/).
# Steps are chosen by arguments: tests, bench, gemvtime. Output goes to $OUT.
H=build/h7
export LD_LIBRARY_PATH=$PWD/$H/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MINKE_BIN=$PWD/$H/minke-cuda MINKE_BUILD=$H/cudatest
OUT=${OUT:-/tmp/out}
mkdir -p $OUT $MINKE_BUILD/tests/cuda
cp $H/bin/* $MINKE_BUILD/tests/cuda/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
for step in "$@"; do
    case $step in
    tests) GEMV_TIME=1 timeout 300 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests.log ;;
    quick) CUDA_TEST_QUICK=1 timeout 200 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests.log ;;
    bench) timeout ${BENCH_TIMEOUT:-300} $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${CTX0:-2048} --ctx-max ${CTXMAX:-4096} \
              --step-incr ${STEP:-2048} -n ${NGEN:-64} --plot $OUT/bench.svg --csv $OUT/bench.csv 2>&1 | tee $OUT/bench.log
           cat $OUT/bench.csv ;;
    esac
done
