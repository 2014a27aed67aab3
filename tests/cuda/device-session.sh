#!/bin/sh
# device-session.sh: what one call on the lent GPU machine runs (see
# docs/performance.md): binaries built here are carried in $H (default
# build/s6, as tools/dev/device-pack.sh packs them: minke-cuda, bin/ =
# tests/cuda/*, and the shared libraries the device image lacks in lib/). Steps are chosen by arguments: tests, quick,
# (quick1 / quick2: its kernel checks / the rest, one device call each), bench,
# benchoff (the same bench with the tensor-core prefill off), prof, ncuk (one
# kernel's ncu details and SASS mix: KERN=regex, tools/dev/sass_mix.py),
# variants (the 4096-token prompt bench per env setting), mmqocc, multi
# (several GPUs: run on nvidia-h200-x2 or larger; MULTI="q2:1 q2:2" picks the runs),
# ablation (each decode stage left out of the graph in turn: its in-graph cost),
# long (ctx 65536: prefill of the interval and decode there), ncupf (ncu of the
# exact prefill's MoE product kernels: PFK="116 10" picks IQ2R / Q2_K), trace (the decode
# graph's kernels as they run, tools/dev/ktrace.c; TCTX the context, TENV settings), exps
# (idx_check, then A/B benches of a setting against the defaults; EXPS4K /
# EXPS64K pick the settings at ctx 4096 / 65536), mmx (cu_mmx's block layouts: checks, kernel
# timings, prompt A/B; MMXT picks the layouts).
# Output goes to $OUT.
H=${H:-build/s6}
# libnccl: the device image has it in its PyTorch venv, not under /usr/local/cuda
NCCLDIR=""
[ -e /usr/local/cuda/lib64/libnccl.so.2 ] ||
    NCCLDIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/$H/lib:/usr/local/cuda/lib64:${NCCLDIR:+$NCCLDIR:}${LD_LIBRARY_PATH:-}
# NVLink multicast stays off on the lent machines (device KINDS.md); the backend sets it too
export NCCL_NVLS_ENABLE=0
export MINKE_BIN=$PWD/$H/minke-cuda MINKE_BUILD=$H/cudatest
OUT=${OUT:-/tmp/out}
mkdir -p $OUT $MINKE_BUILD/tests/cuda
cp $H/bin/* $MINKE_BUILD/tests/cuda/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
for step in "$@"; do
    case $step in
    tests) GEMV_TIME=1 timeout 470 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests.log ;;
    quick) CUDA_TEST_QUICK=1 timeout 470 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests.log ;;
    quick1) CUDA_TEST_QUICK=1 CUDA_TEST_PART=kernels timeout 560 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests1.log ;;
    quick2) CUDA_TEST_QUICK=1 CUDA_TEST_PART=model timeout 560 sh tests/run-cuda.sh 2>&1 | tee $OUT/tests2.log ;;
    bench) timeout ${BENCH_TIMEOUT:-300} $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${CTX0:-2048} --ctx-max ${CTXMAX:-4096} \
              --step-incr ${STEP:-2048} -n ${NGEN:-64} --plot $OUT/bench.svg --csv $OUT/bench.csv 2>&1 | tee $OUT/bench.log
           cat $OUT/bench.csv ;;
    benchoff) MINKE_CUDA_MMQ=0 timeout ${BENCH_TIMEOUT:-300} $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${CTX0:-2048} \
              --ctx-max ${CTXMAX_OFF:-4096} --step-incr ${STEP:-2048} -n ${NGEN:-64} --csv $OUT/benchoff.csv 2>&1 | tee $OUT/benchoff.log ;;
    variants) # the 4096-token prompt bench once per setting in $VARIANTS (space-separated VAR=VALUE[,VAR=VALUE])
          for v in ${VARIANTS:-default}; do
              env $(echo "$v" | tr , ' ' | grep -v '^default$') timeout ${BENCH_TIMEOUT:-60} $MINKE_BIN bench --synthetic flash-q2 \
                  --ctx-start 4096 --ctx-max 4096 -n ${NGEN:-8} --csv $OUT/bench-$v.csv > $OUT/bench-$v.log 2>&1
              echo "bench $v: $(tail -1 $OUT/bench-$v.csv 2>/dev/null)"
          done ;;
    mmqocc) # the register-capped k_mmq variants: kernel checks, and tiny q2 logits equal to the default build's
          D=$OUT/occ; mkdir -p $D; G=$MINKE_BUILD/tmp/cuda/tiny-q2.gguf; TK=tests/fixtures/oracle/tiny-a/tokens.i32
          $MINKE_BIN logits -m $G --tokens $TK --out $D/occ1.f32 --backend cuda > /dev/null 2>&1
          for occ in 3 4; do
              MINKE_CUDA_MMQ_OCC=$occ $MINKE_BUILD/tests/cuda/gemv_check | grep -E '^(FAIL|gemv_check)' | sed "s/^/occ $occ: /"
              MINKE_CUDA_MMQ_OCC=$occ $MINKE_BIN logits -m $G --tokens $TK --out $D/occ$occ.f32 --backend cuda > /dev/null 2>&1
              $MINKE_BUILD/tests/cuda/cmp_f32 $D/occ1.f32 $D/occ$occ.f32 1024 0 --argmax --label "occ $occ vs default"
          done ;;
    multi) # several GPUs (docs/multigpu.md): the all-reduce alone, then q2 on 1 and 2 GPUs, q4 and MXFP4 on 2
          timeout 120 $MINKE_BUILD/tests/cuda/nccl_check --time 2>&1 | tee $OUT/nccl.log
          for c in ${MULTI:-q2:1 q2:2 q4:2 mxfp4:2}; do
              timeout ${BENCH_TIMEOUT:-150} $MINKE_BIN bench --synthetic flash-${c%%:*} --ctx-start 4096 --ctx-max 4096 \
                  -n ${NGEN:-32} --gpus ${c##*:} > $OUT/bench-multi.log 2>&1
              echo "flash-${c%%:*} --gpus ${c##*:}: $(grep -E 'ctx +4096' $OUT/bench-multi.log | sed 's/of 790.*decode/decode/')"
          done ;;
    ablation) # MINKE_CUDA_SKIP=stage: the step without that stage's launches (results wrong, time right)
          for k in base ${SKIPS:-moe_gate_up moe_down out_a out_b q_a+q_b q_b attention hc_pre router shared kv compressor,idx_comp idx_score,idx_topk q_norm_rope idx_q} base; do
              e=""; [ "$k" = base ] || e="MINKE_CUDA_SKIP=$k"
              env $e timeout 60 $MINKE_BIN bench --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n ${NGEN:-32} \
                  --csv $OUT/abl.csv > $OUT/abl.log 2>&1
              echo "skip $k: $(tail -1 $OUT/abl.csv 2>/dev/null)"
          done ;;
    long) timeout 300 $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${LCTX:-65536} --ctx-max ${LCTX:-65536} -n 32 \
              --csv $OUT/long.csv > $OUT/long.log 2>&1; tail -2 $OUT/long.log ;;
    ncupf) for kk in ${PFK:-116 10}; do
              timeout 300 ncu --clock-control none --set full --import-source yes --kernel-name-base demangled \
                  -k "regex:k_mmqx<.int.$kk," --launch-skip ${PFS:-8} --launch-count 1 -o $OUT/pf$kk $MINKE_BIN bench \
                  --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n 1 > $OUT/ncu-pf$kk.log 2>&1
              ncu -i $OUT/pf$kk.ncu-rep --page details > $OUT/pf$kk-details.txt 2>&1
              ncu -i $OUT/pf$kk.ncu-rep --page source --csv --print-source sass > $OUT/pf$kk-sass.csv 2>&1
              rm -f $OUT/pf$kk.ncu-rep
          done ;;
    trace) # every kernel of the decode steps with its GPU start / end (CUPTI, graph nodes included):
          # the step, a CSA layer and the shared down's tail (tools/dev/ktrace_step.py); the CSV comes back xz'd
          CU=$(ls /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* /usr/local/cuda*/targets/x86_64-linux/lib/libcupti.so* 2>/dev/null | head -1)
          if [ -z "$CU" ] || [ ! -f $H/lib/ktrace.so ]; then echo "trace: no libcupti ($CU) or no $H/lib/ktrace.so"; else
              env ${TENV:-X=1} KTRACE_CUPTI=$CU KTRACE_OUT=/tmp/ktrace.csv LD_PRELOAD=$PWD/$H/lib/ktrace.so timeout 150 $MINKE_BIN bench \
                  --synthetic flash-q2 --ctx-start ${TCTX:-4096} --ctx-max ${TCTX:-4096} -n 16 > $OUT/trace-bench.log 2>&1
              python3 tools/dev/ktrace_step.py /tmp/ktrace.csv | head -30
              python3 tools/dev/ktrace_step.py /tmp/ktrace.csv --tail
              python3 tools/dev/ktrace_step.py /tmp/ktrace.csv --layer ${TLAYER:-20}
              xz -9 -T8 < /tmp/ktrace.csv > $OUT/ktrace-${TCTX:-4096}.csv.xz
          fi ;;
    prof) MINKE_CUDA_PROFILE=1 timeout 200 $MINKE_BIN bench --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n 16 \
              --csv $OUT/prof.csv 2>&1 | tee $OUT/prof.log ;;
    ncuk) # one kernel under ncu --set full, graphs off (KERN: a name regex; KSKIP launches skipped, default 50;
          # KENV: settings; KCTX: the context): the details and SASS pages, and tools/dev/sass_mix.py's
          # summary (KPER: the units, e.g. weights a launch, for its /unit column)
          env $KENV MINKE_CUDA_NO_GRAPH=1 timeout ${NCU_TIMEOUT:-300} ncu --clock-control none --set full --import-source no \
              -k "regex:${KERN:?KERN: a kernel name regex}" --launch-skip ${KSKIP:-50} --launch-count 1 -f -o /tmp/ncuk \
              $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${KCTX:-4096} --ctx-max ${KCTX:-4096} -n 2 --warmup 0 \
              > $OUT/ncuk.log 2>&1; echo "ncu rc=$?"
          ncu -i /tmp/ncuk.ncu-rep --page details > $OUT/ncuk-details.txt 2>&1
          ncu -i /tmp/ncuk.ncu-rep --page source --csv --print-source sass > $OUT/ncuk-sass.csv 2>&1
          grep -E "Duration|Issue Slots Busy|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|DRAM Throughput" \
              $OUT/ncuk-details.txt
          python3 tools/dev/sass_mix.py $OUT/ncuk-sass.csv ${KPER:+--per $KPER} ;;
    ncu) # every kernel's duration, graphs off (a 4096-token prefill, then NCU_GEN decode steps): tools/ncu_table.py reads it
          MINKE_CUDA_NO_GRAPH=1 timeout ${NCU_TIMEOUT:-400} ncu --clock-control none --metrics gpu__time_duration.sum --csv \
              --log-file $OUT/ncu.csv $MINKE_BIN bench --synthetic flash-q2 --ctx-start ${NCU_CTX:-4096} --ctx-max ${NCU_CTX:-4096} \
              -n ${NCU_GEN:-2} > $OUT/ncu-bench.log 2>&1; tail -3 $OUT/ncu-bench.log; wc -l $OUT/ncu.csv ;;
    exps) # the experiments left off by default (docs/performance.md, "ready for the next device call"):
          # their checks, then A/B benches alternating (X=0: the defaults; EXPS4K / EXPS64K: the other setting)
          timeout 120 $MINKE_BUILD/tests/cuda/idx_check > $OUT/idx.log 2>&1; echo "idx_check rc=$?"
          grep -E '^FAIL|decode on the tensor|time idx_scores decode' $OUT/idx.log
          for r in 1 2 3; do for v in X=0 ${EXPS4K:-MINKE_CUDA_ATT_MINB=1}; do
              env $v timeout 60 $MINKE_BIN bench --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n 64 \
                  --csv $OUT/exp.csv > $OUT/exp.log 2>&1; echo "4096 $v: $(tail -1 $OUT/exp.csv)"
          done; done
          for r in 1 2; do for v in X=0 ${EXPS64K:-MINKE_CUDA_IDX_TC_DEC_ROWS=0}; do
              env $v timeout 120 $MINKE_BIN bench --synthetic flash-q2 --ctx-start 65536 --ctx-max 65536 -n 32 \
                  --csv $OUT/exp.csv > $OUT/exp.log 2>&1; echo "65536 $v: $(tail -1 $OUT/exp.csv)"
          done; done ;;
    mmx) # cu_mmx's block layouts (MINKE_CUDA_MMX_TILE, MMXT="1 6 7 8" by default): each one's checks
         # and Flash-shape timings, then 4096-token prompt benches alternating them (and the int8 path)
         for t in ${MMXT:-1 6 7 8}; do
             MINKE_CUDA_MMX_TILE=$t timeout 120 $MINKE_BUILD/tests/cuda/mmx_check --time > $OUT/mmx$t.log 2>&1
             echo "TILE=$t rc=$?"; grep -E '^FAIL|^time|all ok' $OUT/mmx$t.log
         done
         for r in 1 2; do for v in MINKE_CUDA_MMX=0 $(for t in ${MMXT:-1 6 7 8}; do echo MINKE_CUDA_MMX_TILE=$t; done); do
             env $v timeout 60 $MINKE_BIN bench --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n 4 \
                 --csv $OUT/mmx.csv > $OUT/mmxb.log 2>&1; echo "4096 $v: $(tail -1 $OUT/mmx.csv)"
         done; done ;;
    taps) D=$OUT/taps; mkdir -p $D; G=$D/tiny-q2.gguf
          $MINKE_BIN convert tests/fixtures/oracle/tiny-a -o $G --no-progress >/dev/null 2>&1
          head -c 96 tests/fixtures/oracle/tiny-a/tokens.i32 > $D/t.i32
          for be in cpu cuda; do $MINKE_BIN logits -m $G --tokens $D/t.i32 --out $D/$be.f32 --backend $be --dump-taps $D/$be >/dev/null 2>&1; done
          for f in $(ls -tr $D/cpu/); do n=$(( $(wc -c < $D/cpu/$f) / 4 / 24 )); $MINKE_BUILD/tests/cuda/cmp_f32 $D/cpu/$f $D/cuda/$f $n 1e-4 --label $f | sed 's/max|ref.*first/first/'; done ;;
    norepack) D=$OUT/nr; mkdir -p $D; G=$D/tiny-q2.gguf
          $MINKE_BIN convert tests/fixtures/oracle/tiny-a -o $G --no-progress >/dev/null 2>&1
          $MINKE_BIN logits -m $G --tokens tests/fixtures/oracle/tiny-a/tokens.i32 --out $D/cpu.f32 --backend cpu
          $MINKE_BIN logits -m $G --tokens tests/fixtures/oracle/tiny-a/tokens.i32 --out $D/cuda.f32 --backend cuda
          MINKE_CUDA_NO_REPACK=1 $MINKE_BIN logits -m $G --tokens tests/fixtures/oracle/tiny-a/tokens.i32 --out $D/cuda-nr.f32 --backend cuda
          $MINKE_BUILD/tests/cuda/cmp_f32 $D/cpu.f32 $D/cuda.f32 1024 1e-3 --argmax --label repack
          $MINKE_BUILD/tests/cuda/cmp_f32 $D/cpu.f32 $D/cuda-nr.f32 1024 1e-3 --argmax --label norepack
          $MINKE_BIN logits -m $G --tokens tests/fixtures/oracle/tiny-a/tokens.i32 --out $D/cpu-noact.f32 --backend cpu --f32-act
          $MINKE_BUILD/tests/cuda/cmp_f32 $D/cpu.f32 $D/cpu-noact.f32 1024 1e-3 --argmax --label cpu-act-vs-f32act ;;
    esac
done
