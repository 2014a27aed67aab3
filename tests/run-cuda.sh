#!/bin/sh
# run-cuda.sh: the CUDA backend's checks, run on a machine with an NVIDIA GPU
# (make test-cuda, or directly with MINKE_BIN = a CUDA build of minke and
# MINKE_BUILD = its build dir holding tests/cuda/*):
#   1. gemv_check: every quantized matmul kernel against src/quant;
#   2. tiny-a (tests/fixtures/oracle) converted to F32 and to the default q2
#      policy, simulations on and off, one prefill, uneven chunks and
#      token-by-token decode (CUDA graphs):
#      F32: CUDA vs CPU logits, same argmax at every position and
#        max|diff| <= 1e-3 x max|logit|;
#      q2: chunks of 64 vs the CUDA prefill within 1e-4 (same argmax: both
#        run the tensor-core kernels of cu_mmq.cu, which give every token the
#        same arithmetic whatever its batch), chunks of 7 and decode (GEMV
#        kernels: the same integer dots, another float summation order) and
#        CUDA vs CPU no further apart than the CPU's own two numerics (its
#        quantized activations vs --f32-act; see cmp_f32.c --noise): the
#        int8 activations turn rounding-order differences into different
#        rounding decisions that this random tiny model amplifies;
#   3. compute-sanitizer memcheck of a CUDA run on the tiny model (a chunk
#      of 33 tokens on the tensor cores, then 7 on the GEMV kernels; decode).
# Set CUDA_TEST_QUICK=1 to skip the sanitizer.
cd "$(dirname "$0")/.." || exit 1
B=${MINKE_BUILD:-build/cuda}
M=${MINKE_BIN:-$(pwd)/minke}
T=$B/tmp/cuda
mkdir -p "$T"
pass=0; fail=0; failed=""
ok() { pass=$((pass+1)); echo "PASS $1"; }
bad() { fail=$((fail+1)); failed="$failed $1"; echo "FAIL $1"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no NVIDIA GPU here"; exit 0
fi
nvidia-smi -L

if "$B/tests/cuda/gemv_check" ${GEMV_TIME:+--time} > "$T/gemv.log" 2>&1; then ok gemv_check; else bad gemv_check; fi
grep -E '^(FAIL|time)' "$T/gemv.log"

FIX=tests/fixtures/oracle/tiny-a
TOK=$FIX/tokens.i32
NTOK=$(( $(wc -c < "$TOK") / 4 ))
"$M" convert "$FIX" -o "$T/tiny-f32.gguf" --experts f32 --dense f32 --no-progress > "$T/conv.log" 2>&1 || bad convert-f32
"$M" convert "$FIX" -o "$T/tiny-q2.gguf" --no-progress >> "$T/conv.log" 2>&1 || bad convert-q2

for model in f32 q2; do
    for sims in on off; do
        G="$T/tiny-$model.gguf"
        R="$T/cpu-$model-$sims.f32"
        if ! "$M" logits -m "$G" --tokens "$TOK" --out "$R" --backend cpu --sims $sims > "$T/cpu-$model-$sims.log" 2>&1; then
            bad "cpu-logits-$model-$sims"; cat "$T/cpu-$model-$sims.log"; continue
        fi
        V=$(( $(wc -c < "$R") / 4 / NTOK ))
        noise=""
        if [ $model = q2 ]; then
            "$M" logits -m "$G" --tokens "$TOK" --out "$T/cpu-$model-$sims-f32act.f32" --backend cpu --sims $sims --f32-act \
                > /dev/null 2>&1 && noise="--noise $T/cpu-$model-$sims-f32act.f32"
        fi
        for mode in prefill chunk7 chunk64 decode; do
            case $mode in
                prefill) opt="" ;;
                chunk7) opt="--chunk 7" ;;
                chunk64) opt="--chunk 64" ;;
                decode) opt="--decode" ;;
            esac
            name="tiny-$model-sims$sims-$mode"
            O="$T/cuda-$model-$sims-$mode.f32"
            if ! "$M" logits -m "$G" --tokens "$TOK" --out "$O" --backend cuda --sims $sims $opt > "$T/$name.log" 2>&1; then
                bad "$name"; tail -5 "$T/$name.log"; continue
            fi
            if "$B/tests/cuda/cmp_f32" "$R" "$O" "$V" 1e-3 --argmax --label "$name" $noise; then ok "$name"; else bad "$name"; fi
            if [ $mode != prefill ]; then
                P="$T/cuda-$model-$sims-prefill.f32"
                # decode splits attention rows over blocks (another summation order): it
                # gets the CPU tolerance (q2: the noise bound); chunked prefills run the
                # same per-token arithmetic as one prefill and must match within 1e-4,
                # except q2 in chunks of 7: below 32 tokens the GEMV kernels replace the
                # tensor-core ones (same integer dots, other float order), so the noise bound
                pn=""; tl=1e-4
                [ $mode = decode ] && tl=1e-3 && [ $model = q2 ] && pn="$noise"
                [ $mode = chunk7 ] && [ $model = q2 ] && tl=1e-3 && pn="$noise"
                if "$B/tests/cuda/cmp_f32" "$P" "$O" "$V" $tl --argmax --label "$name-vs-cuda-prefill" $pn; then
                    ok "$name-vs-cuda-prefill"; else bad "$name-vs-cuda-prefill"; fi
            fi
        done
    done
done

# Measurements, not counted: the tensor-core attention (f16 q/k/p, cu_attn_tc.cu;
# checked against the f32 kernel by gemv_check) forced on for the tiny model's
# 160-token prefill, which by default keeps the f32 kernel (batches < 256 tokens;
# F32 models always): how far this amplifying model moves (docs/performance.md)
for model in f32 q2; do
    for sims in on off; do
        O="$T/cuda-$model-$sims-atttc.f32"
        noise=""
        [ $model = q2 ] && noise="--noise $T/cpu-$model-$sims-f32act.f32"
        MINKE_CUDA_ATT_TC=2 MINKE_CUDA_ATT_TC_MIN=5 "$M" logits -m "$T/tiny-$model.gguf" --tokens "$TOK" --out "$O" \
            --backend cuda --sims $sims > /dev/null 2>&1 && "$B/tests/cuda/cmp_f32" "$T/cpu-$model-$sims.f32" "$O" \
            $(( $(wc -c < "$O") / 4 / NTOK )) 1e-3 --argmax --label "info-tiny-$model-sims$sims-att-tc-forced" $noise | sed 's/^/INFO /'
    done
done

if [ -z "${CUDA_TEST_QUICK:-}" ] && command -v compute-sanitizer >/dev/null 2>&1; then
    head -c 160 "$TOK" > "$T/tok40.i32"
    if compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
        "$M" logits -m "$T/tiny-q2.gguf" --tokens "$T/tok40.i32" --out "$T/san.f32" --backend cuda --chunk 33 \
        > "$T/sanitizer.log" 2>&1 &&
       compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
        "$M" logits -m "$T/tiny-q2.gguf" --tokens "$T/tok40.i32" --out "$T/san2.f32" --backend cuda --decode \
        >> "$T/sanitizer.log" 2>&1; then
        ok memcheck
    else
        bad memcheck; tail -40 "$T/sanitizer.log"
    fi
fi
echo "$pass passed, $fail failed${failed:+:$failed}"
[ "$fail" -eq 0 ]
