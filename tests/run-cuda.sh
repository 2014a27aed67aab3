#!/bin/sh
# run-cuda.sh: the CUDA backend's checks, run on a machine with an NVIDIA GPU
# (make test-cuda, or directly with MINKE_BIN = a CUDA build of minke and
# MINKE_BUILD = its build dir holding tests/cuda/*):
#   1. the kernel checks: gemv_check (every GEMV / tensor-core product against
#      src/quant), and mmq_exact, mmf16_check, hc_check, attn_check, idx_check
#      where built;
#   2. tiny-a (tests/fixtures/oracle) converted to F32 and to the default q2
#      policy, simulations on and off, one prefill, uneven chunks and
#      token-by-token decode (CUDA graphs), default numerics (exact
#      activations, docs/numerics.md): CUDA vs CPU logits, same argmax at
#      every position and max|diff| <= 1e-3 x max|logit|; chunks of 64 equal
#      the CUDA prefill within 1e-4 (every token gets the same arithmetic);
#   3. ds4 numerics (--act q8, int8 activations) for q2: CUDA vs CPU no
#      further apart than the CPU's own q8-vs-exact difference (cmp_f32.c
#      --noise): int8 activations turn rounding-order differences into
#      different rounding decisions that this random tiny model amplifies;
#   3b. packed KV rows (the default with the simulations on) against f32
#      rows, and the state payload through --restore-at: bit for bit;
#   4. compute-sanitizer memcheck of a CUDA run on the tiny model (a chunk
#      of 33 tokens on the tensor cores, then 7 on the GEMV kernels; decode).
# Set CUDA_TEST_QUICK=1 to skip the sanitizer. CUDA_TEST_PART=kernels runs step 1
# only, CUDA_TEST_PART=model the rest (the two halves fit the device tool's calls
# of 600 s each; tests/cuda/device-session.sh: quick1, quick2).
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

if [ "${CUDA_TEST_PART:-all}" != model ]; then
for k in gemv_check mmq_exact mmf16_check mmh_check mmx_check hc_check attn_check idx_check argmax_check sample_check moe_dec_check moes_check kvfmt_check nccl_check; do
    [ -x "$B/tests/cuda/$k" ] || continue
    if "$B/tests/cuda/$k" ${GEMV_TIME:+--time} > "$T/$k.log" 2>&1; then ok $k; else bad $k; fi
    grep -E '^(FAIL|time)' "$T/$k.log"
done
# the decode attention with one row group a block (MINKE_CUDA_ATT_RG=1), and its FP8 8-head instance
# with the two-blocks-a-SM request everywhere (cu_attn.cu, ADEC_MINB; one token takes the uncapped one)
if [ -x "$B/tests/cuda/attn_check" ]; then
    if MINKE_CUDA_ATT_RG=1 "$B/tests/cuda/attn_check" > "$T/attn_rg1.log" 2>&1; then ok attn_check-rg1; else bad attn_check-rg1; fi
    if MINKE_CUDA_ATT_RG=1 MINKE_CUDA_ATT_MINB=1 "$B/tests/cuda/attn_check" > "$T/attn_minb1.log" 2>&1; then ok attn_check-minb1; else bad attn_check-minb1; fi
    # other shapes (heads not a multiple of 8, hd 128-384, T up to 4, splits of one row), 8 heads a block
    for rg in 2 1; do
        if MINKE_CUDA_ATT_HPB=8 MINKE_CUDA_ATT_MIN_ROWS=1 MINKE_CUDA_ATT_RG=$rg "$B/tests/cuda/attn_check" --shapes \
            > "$T/attn_shapes$rg.log" 2>&1; then ok attn_check-shapes-rg$rg; else bad attn_check-shapes-rg$rg; fi
    done
    grep -hE '^FAIL' "$T/attn_rg1.log" "$T/attn_minb1.log" "$T/attn_shapes2.log" "$T/attn_shapes1.log"
fi

# the indexer's tensor-core scores on mma.sync (the wgmma form is the default on sm_90a; elsewhere both are mma.sync)
if [ -x "$B/tests/cuda/idx_check" ]; then
    if MINKE_CUDA_IDX_WG=0 "$B/tests/cuda/idx_check" > "$T/idx_wg0.log" 2>&1; then ok idx_check-wg0; else bad idx_check-wg0; fi
    grep -E '^FAIL' "$T/idx_wg0.log"
fi

# cu_mmx's other block layouts (kept for A/B, MINKE_CUDA_MMX_TILE; 6-9, 11 and 12 are the wgmma kernels,
# 9 the default that the mmx_check run above took: layout 1 stands in for it off sm_90)
if [ -x "$B/tests/cuda/mmx_check" ]; then
    for t in 1 2 3 4 5 6 7 8 11 12; do
        if MINKE_CUDA_MMX_TILE=$t "$B/tests/cuda/mmx_check" > "$T/mmx_tile$t.log" 2>&1; then ok mmx_check-tile$t; else bad mmx_check-tile$t; fi
        grep -E '^FAIL' "$T/mmx_tile$t.log"
    done
fi

# cu_mmh's grouped input as one GEMM a group (the batched GEMM is the default)
if [ -x "$B/tests/cuda/mmh_check" ]; then
    if MINKE_CUDA_MMH_BATCH=0 "$B/tests/cuda/mmh_check" > "$T/mmh_batch0.log" 2>&1; then ok mmh_check-batch0; else bad mmh_check-batch0; fi
    grep -E '^FAIL' "$T/mmh_batch0.log"
fi
fi
if [ "${CUDA_TEST_PART:-all}" = kernels ]; then echo "$pass passed, $fail failed${failed:+:$failed}"; [ "$fail" -eq 0 ]; exit; fi

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
            if "$B/tests/cuda/cmp_f32" "$R" "$O" "$V" 1e-3 --argmax --label "$name"; then ok "$name"; else bad "$name"; fi
            # chunks of 64 run the same per-token arithmetic as one prefill
            if [ $mode = chunk64 ]; then
                P="$T/cuda-$model-$sims-prefill.f32"
                if "$B/tests/cuda/cmp_f32" "$P" "$O" "$V" 1e-4 --argmax --label "$name-vs-cuda-prefill"; then
                    ok "$name-vs-cuda-prefill"; else bad "$name-vs-cuda-prefill"; fi
            fi
        done
    done
done

# A prefill path forced onto the tiny q2 model's prompt from 32 tokens: prefill
# and chunks of 64 against the CPU like the int8 kernels above, and bits unlike
# the default path's (the path was taken). forced_q2 SUFFIX INFO_ON ENV...:
# INFO_ON=1 makes the simulations-on comparison an INFO line.
forced_q2() {
    suffix=$1; info_on=$2; shift 2
    for sims in on off; do
        for mode in prefill chunk64; do
            opt=""; [ $mode = chunk64 ] && opt="--chunk 64"
            name="tiny-q2-sims$sims-$mode-$suffix"
            O="$T/cuda-q2-$sims-$mode-$suffix.f32"
            R="$T/cpu-q2-$sims.f32"
            if ! env "$@" "$M" logits -m "$T/tiny-q2.gguf" --tokens "$TOK" --out "$O" --backend cuda --sims $sims $opt \
                > "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
            V=$(( $(wc -c < "$R") / 4 / NTOK ))
            if [ $sims = on ] && [ "$info_on" = 1 ]; then
                "$B/tests/cuda/cmp_f32" "$R" "$O" "$V" 1e-3 --argmax --label "info-$name" | sed 's/^/INFO /'
            elif "$B/tests/cuda/cmp_f32" "$R" "$O" "$V" 1e-3 --argmax --label "$name"; then ok "$name"; else bad "$name"; fi
            if cmp -s "$O" "$T/cuda-q2-$sims-$mode.f32"; then bad "$name-taken"; else ok "$name-taken"; fi
        done
    done
}

# The dense Q8_0 products as cuBLASLt f16 GEMMs of exact pieces (cu_mmh.cu) on
# every product: with the simulations on, an INFO line: the f16 path sums in
# f32 on the tensor cores (mmh_check: ~2.5e-6 of max|y|, the CPU's own
# rounding level, against 2e-7 for the int8 pieces), and this model turns
# such differences into other FP8 roundings and indexer choices (as the
# forced attention tensor cores below)
forced_q2 mmh 1 MINKE_CUDA_MMH=1 MINKE_CUDA_MMH_MIN=32 MINKE_CUDA_MMH_MINW=1
# The HC pre step of batches as before the nineteenth session (the mixes on the CUDA cores,
# k_hc_mix_tiled; the finish in one launch), kept for A/B: the default's mixes are on the TF32
# tensor cores from 64 tokens (hc_check holds both to the double reference)
forced_q2 hcold 0 MINKE_CUDA_HC_TC=0 MINKE_CUDA_HC_FIN=0
# x split once for all of a sub-layer's products (cu_mmh_share_x, the default) against
# each product splitting it (MINKE_CUDA_MMH_SHARE=0): the same bits
forced_q2 mmhns 1 MINKE_CUDA_MMH=1 MINKE_CUDA_MMH_MIN=32 MINKE_CUDA_MMH_MINW=1 MINKE_CUDA_MMH_SHARE=0
for sims in on off; do
    for mode in prefill chunk64; do
        if cmp -s "$T/cuda-q2-$sims-$mode-mmh.f32" "$T/cuda-q2-$sims-$mode-mmhns.f32"; then ok "tiny-q2-sims$sims-$mode-mmh-shared-x"
        else bad "tiny-q2-sims$sims-$mode-mmh-shared-x"; fi
    done
done

# The routed experts' products on the f16 tensor cores (cu_mmx.cu: the IQ2 gate /
# up and the Q2_K down), checks with the simulations on and off; mmx_check holds
# the kernels themselves to the double reference. The default block layout (9,
# wgmma, on the H200: the gate / up on 128-pair blocks, the down on layout 6),
# layout 6 and layout 1 (mma.sync, the layout of other GPUs) move the simulated
# model no more than the int8 pieces do (3.6e-4 with the simulations on,
# 1.5e-6 / 2.4e-6 off; 9 and 6 the same figures, the same per-element sums). The simulations-on figure is fragile:
# the FP8 roundings turn another summation order into other choices (0.018,
# argmax unchanged, with the gate / up on wgmma and the down on mma.sync;
# fourteenth session), as for cu_mmh above. Layout 1 with the simulations on is an
# INFO line since the nineteenth session: the HC mixes of batches on the TF32 tensor
# cores (sums in another order, within 1.2e-7 of the double dots) move it to the same
# 0.018, argmax unchanged (3.6e-4 with MINKE_CUDA_HC_TC=0); off, 2.3e-6.
forced_q2 mmx1 1 MINKE_CUDA_MMX=1 MINKE_CUDA_MMX_Q2K=1 MINKE_CUDA_MMX_MIN=32 MINKE_CUDA_MMX_TILE=1
forced_q2 mmx6 0 MINKE_CUDA_MMX=1 MINKE_CUDA_MMX_MIN=32 MINKE_CUDA_MMX_TILE=6
forced_q2 mmx 0 MINKE_CUDA_MMX=1 MINKE_CUDA_MMX_MIN=32

# The KV cache's packed rows (FP8 attention rows, FP4 indexer rows; the
# default with the simulations on) hold the simulations' values: the same
# logits bit for bit as f32 rows (MINKE_CUDA_KV=f32). Then the state payload
# (--restore-at: serialise after 37 tokens, continue in a new session loaded
# from the bytes) must not change a bit either, packed and f32.
for model in f32 q2; do
    for mode in prefill chunk7 decode; do
        case $mode in prefill) opt="" ;; chunk7) opt="--chunk 7" ;; decode) opt="--decode" ;; esac
        name="tiny-$model-kv-f32-vs-packed-$mode"
        O="$T/cuda-$model-on-kvf32-$mode.f32"
        if ! MINKE_CUDA_KV=f32 "$M" logits -m "$T/tiny-$model.gguf" --tokens "$TOK" --out "$O" --backend cuda $opt \
            > "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
        V=$(( $(wc -c < "$O") / 4 / NTOK ))
        if "$B/tests/cuda/cmp_f32" "$T/cuda-$model-on-$mode.f32" "$O" "$V" 0 --argmax --label "$name"; then ok "$name"; else bad "$name"; fi
    done
done
for v in "on decode" "on chunk37" "off decode"; do
    sims=${v%% *}; mode=${v#* }
    case $mode in decode) opt="--decode" ;; chunk37) opt="--chunk 37" ;; esac
    name="tiny-q2-sims$sims-restore-$mode"
    A="$T/cuda-q2-$sims-norestore-$mode.f32"; O="$T/cuda-q2-$sims-restore-$mode.f32"
    if ! "$M" logits -m "$T/tiny-q2.gguf" --tokens "$TOK" --out "$A" --backend cuda --sims $sims $opt > "$T/$name.log" 2>&1 ||
       ! "$M" logits -m "$T/tiny-q2.gguf" --tokens "$TOK" --out "$O" --backend cuda --sims $sims $opt --restore-at 37 \
            >> "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
    V=$(( $(wc -c < "$O") / 4 / NTOK ))
    if "$B/tests/cuda/cmp_f32" "$A" "$O" "$V" 0 --argmax --label "$name"; then ok "$name"; else bad "$name"; fi
done

# chat and serve's decode (minke_decode, minke_sample): the logits stay on the device and only the
# sampler's candidates come back (cu_sample.cu); the same seed must sample the same tokens as
# every step's logits fetched and sampled on the host (bench --sample, with and without --host-logits)
for sims in on off; do
    "$M" bench -m "$T/tiny-q2.gguf" --backend cuda --sims $sims --ctx-start 40 --ctx-max 120 --step-incr 40 -n 24 \
        --sample > /dev/null 2> "$T/sample-dev-$sims.log" &&
    "$M" bench -m "$T/tiny-q2.gguf" --backend cuda --sims $sims --ctx-start 40 --ctx-max 120 --step-incr 40 -n 24 \
        --sample --host-logits > /dev/null 2> "$T/sample-host-$sims.log" &&
    H1=$(grep -o 'tokens hash [0-9a-f]*' "$T/sample-dev-$sims.log" | tr '\n' ' ') &&
    H2=$(grep -o 'tokens hash [0-9a-f]*' "$T/sample-host-$sims.log" | tr '\n' ' ') &&
    [ "$(echo "$H1" | wc -w)" -eq 9 ] && [ "$H1" = "$H2" ] && ok "sample-device-$sims" ||
        { bad "sample-device-$sims"; echo "device: $H1 host: $H2"; tail -2 "$T/sample-dev-$sims.log"; }
done

# ds4 numerics (--act q8) on q2: held to the noise bound of the CPU's q8-vs-exact difference
for sims in on off; do
    G="$T/tiny-q2.gguf"
    R="$T/cpu-q2-$sims-q8.f32"
    "$M" logits -m "$G" --tokens "$TOK" --out "$R" --backend cpu --sims $sims --act q8 > /dev/null 2>&1 || { bad "cpu-q8-$sims"; continue; }
    V=$(( $(wc -c < "$R") / 4 / NTOK ))
    for mode in prefill decode; do
        opt=""; [ $mode = decode ] && opt="--decode"
        name="tiny-q2-act-q8-sims$sims-$mode"
        O="$T/cuda-q2-$sims-q8-$mode.f32"
        if ! "$M" logits -m "$G" --tokens "$TOK" --out "$O" --backend cuda --sims $sims --act q8 $opt > "$T/$name.log" 2>&1; then
            bad "$name"; tail -5 "$T/$name.log"; continue
        fi
        if "$B/tests/cuda/cmp_f32" "$R" "$O" "$V" 1e-3 --argmax --label "$name" --noise "$T/cpu-q2-$sims.f32"; then
            ok "$name"; else bad "$name"; fi
    done
done

# Several GPUs in one process (docs/multigpu.md): routed experts split by id,
# the rest replicated, one NCCL all-reduce of the MoE output a layer.
#   a. MINKE_CUDA_FORCE_NCCL=1 runs that path with one GPU (a one-rank
#      communicator, its all-reduces, the thread pool, the owned-expert
#      masks): it must equal the plain path bit for bit;
#   b. with two GPUs or more: --gpus 2 (experts by id, the dense attention
#      output and shared expert split: tensor parallel) within 1e-3 x
#      max|logit| of one GPU and of the CPU, the same argmax, for prefill,
#      uneven chunks and decode (only the order of some sums changes); the
#      other splits (dense replicated; experts by rows) against one GPU.
NGPU=$(nvidia-smi -L | grep -c '^GPU')
for mode in prefill chunk7 decode; do
    case $mode in prefill) opt="" ;; chunk7) opt="--chunk 7" ;; decode) opt="--decode" ;; esac
    name="tiny-q2-nccl1-$mode"
    O="$T/cuda-q2-on-nccl1-$mode.f32"
    if ! MINKE_CUDA_FORCE_NCCL=1 "$M" logits -m "$T/tiny-q2.gguf" --tokens "$TOK" --out "$O" --backend cuda $opt \
        > "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
    V=$(( $(wc -c < "$O") / 4 / NTOK ))
    if "$B/tests/cuda/cmp_f32" "$T/cuda-q2-on-$mode.f32" "$O" "$V" 0 --argmax --label "$name"; then ok "$name"; else bad "$name"; fi
done
if [ "$NGPU" -ge 2 ]; then
    for model in f32 q2; do
        for mode in prefill chunk7 decode; do
            case $mode in prefill) opt="" ;; chunk7) opt="--chunk 7" ;; decode) opt="--decode" ;; esac
            name="tiny-$model-gpus2-$mode"
            O="$T/cuda-$model-on-gpus2-$mode.f32"
            if ! "$M" logits -m "$T/tiny-$model.gguf" --tokens "$TOK" --out "$O" --backend cuda --gpus 2 $opt \
                > "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
            V=$(( $(wc -c < "$O") / 4 / NTOK ))
            if "$B/tests/cuda/cmp_f32" "$T/cuda-$model-on-$mode.f32" "$O" "$V" 1e-3 --argmax --label "$name-vs-1gpu"; then
                ok "$name-vs-1gpu"; else bad "$name-vs-1gpu"; fi
            if "$B/tests/cuda/cmp_f32" "$T/cpu-$model-on.f32" "$O" "$V" 1e-3 --argmax --label "$name-vs-cpu"; then
                ok "$name-vs-cpu"; else bad "$name-vs-cpu"; fi
        done
    done
    # the other splits: dense projections replicated (MINKE_CUDA_TP=0), and the
    # experts split by rows instead of by id (F32 only: tiny-a's Q2_K experts
    # have 256 hidden rows, one block, which two GPUs cannot share)
    for v in "q2 MINKE_CUDA_TP=0" "f32 MINKE_CUDA_TP=0" "f32 MINKE_CUDA_EXPERT_SPLIT=rows"; do
        model=${v%% *}; envs=$(echo "${v#* }" | tr , ' ')
        for mode in prefill decode; do
            opt=""; [ $mode = decode ] && opt="--decode"
            name="tiny-$model-gpus2-$(echo "${v#* }" | tr -d ' ' | tr ',=' '-_')-$mode"
            O="$T/$name.f32"
            if ! env $envs "$M" logits -m "$T/tiny-$model.gguf" --tokens "$TOK" --out "$O" --backend cuda --gpus 2 $opt \
                > "$T/$name.log" 2>&1; then bad "$name"; tail -5 "$T/$name.log"; continue; fi
            V=$(( $(wc -c < "$O") / 4 / NTOK ))
            if "$B/tests/cuda/cmp_f32" "$T/cuda-$model-on-$mode.f32" "$O" "$V" 1e-3 --argmax --label "$name"; then
                ok "$name"; else bad "$name"; fi
        done
    done
    # a clear error for a count that does not divide the experts, and for more GPUs than the machine has
    if "$M" logits -m "$T/tiny-q2.gguf" --tokens "$TOK" --out "$T/x.f32" --backend cuda --gpus 3 > "$T/gpus3.log" 2>&1 ||
       ! grep -q "does not divide\|has [0-9]* CUDA device" "$T/gpus3.log"; then
        bad gpus3-clear-error; cat "$T/gpus3.log"; else ok gpus3-clear-error; fi
else
    echo "SKIP several-GPU checks: $NGPU GPU here"
fi

# Measurements, not counted: the tensor-core attention (f16 q/k/p, cu_attn_tc.cu;
# checked against the f32 kernel by gemv_check) forced on for the tiny model's
# 160-token prefill, which by default keeps the f32 kernel (batches < 256 tokens;
# F32 models always): how far this amplifying model moves (docs/performance.md)
for model in f32 q2; do
    for sims in on off; do
        O="$T/cuda-$model-$sims-atttc.f32"
        MINKE_CUDA_ATT_TC=2 MINKE_CUDA_ATT_TC_MIN=5 "$M" logits -m "$T/tiny-$model.gguf" --tokens "$TOK" --out "$O" \
            --backend cuda --sims $sims > /dev/null 2>&1 && "$B/tests/cuda/cmp_f32" "$T/cpu-$model-$sims.f32" "$O" \
            $(( $(wc -c < "$O") / 4 / NTOK )) 1e-3 --argmax --label "info-tiny-$model-sims$sims-att-tc-forced" | sed 's/^/INFO /'
    done
done

# a 2048-wide synthetic model: its IQ2R expert rows (528 bytes) take the
# decode's tensor-core gate + up (cu_gemv3.cu k_moe_glu_mma, the default on
# sm_90), which the tiny-a rows (66 bytes) never reach; one token at a time
# against the CPU, with it (1, the default: 8 warps; 2: 16) and without (0: dp4a)
"$M" mkmodel --preset small --dim 2048 --layers 3 --n-experts 8 --experts-used 6 --expert-ff 512 --vocab 1024 \
    --seed 26 -o "$T/mid.gguf" --no-progress > "$T/mid-mk.log" 2>&1 || bad mkmodel-mid
head -c 192 "$TOK" > "$T/tok48.i32"
if "$M" logits -m "$T/mid.gguf" --tokens "$T/tok48.i32" --out "$T/cpu-mid.f32" --backend cpu > "$T/cpu-mid.log" 2>&1; then
    for mm in 1 2 0; do
        name="mid2048-decode-moe-mma$mm"
        if MINKE_CUDA_MOE_MMA=$mm "$M" logits -m "$T/mid.gguf" --tokens "$T/tok48.i32" --out "$T/$name.f32" --backend cuda \
            --decode > "$T/$name.log" 2>&1 &&
           "$B/tests/cuda/cmp_f32" "$T/cpu-mid.f32" "$T/$name.f32" 1024 1e-3 --argmax --label "$name"; then ok "$name"
        else bad "$name"; tail -3 "$T/$name.log"; fi
    done
else
    bad cpu-logits-mid; tail -3 "$T/cpu-mid.log"
fi

# a Flash-shaped model (4 layers: sliding, CSA, HCA; 8 small experts): its one-token
# out_a and out_b take their inputs as items split by the attention's combine and
# by out_a (cu_gemv_args.xitems, MINKE_CUDA_G3_ITEMS=1, the default), which the
# smaller models' products never reach; every logit bit as with the products
# splitting their inputs themselves (=0)
"$M" mkmodel --preset flash --layers 4 --n-experts 8 --experts-used 6 --expert-ff 512 --vocab 1024 --hash-layers 1 \
    --seed 28 -o "$T/flash4.gguf" --no-progress > "$T/flash4-mk.log" 2>&1 || bad mkmodel-flash4
for it in 1 0; do
    MINKE_CUDA_G3_ITEMS=$it "$M" logits -m "$T/flash4.gguf" --tokens "$T/tok48.i32" --out "$T/flash4-items$it.f32" \
        --backend cuda --decode > "$T/flash4-items$it.log" 2>&1 || { bad "flash4-decode-items$it"; tail -3 "$T/flash4-items$it.log"; }
done
if "$B/tests/cuda/cmp_f32" "$T/flash4-items0.f32" "$T/flash4-items1.f32" 1024 0 --argmax --label flash4-decode-items-same-bits; then
    ok flash4-decode-items-same-bits
else bad flash4-decode-items-same-bits; fi
rm -f "$T/flash4.gguf"

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
