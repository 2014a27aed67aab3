#!/bin/bash
# device-pack.sh: build the CUDA binaries for the lent H200 (sm_90a only) in a
# worktree and pack them for the device tool's `carry` (tests/cuda/device-session.sh
# runs them there; docs/performance.md has the workflow).
#
#   tools/dev/device-pack.sh [WORKTREE] [OUTDIR]
#
# WORKTREE (default /work/bld): a git worktree of this repository holding the tree to
# test (git worktree add --detach /work/bld HEAD; copy changed files in, or check out a
# revision). OUTDIR (default .devcarry of this checkout, kept out of git by
# .git/info/exclude): gets s6.tar.xz, ~13 MB: build/s6/minke-cuda, build/s6/minke-prev
# (the previously packed binary, for A/B in one call), build/s6/bin/ (tests/cuda
# programs), build/s6/lib/ (the shared libraries the device image lacks). On the device:
#   tar xJf .devcarry/s6.tar.xz && H=build/s6 OUT=$OUT sh tests/cuda/device-session.sh quick
# The test programs each hold the whole CUDA library: strip -g and xz -9 (a 64 MiB
# dictionary) keep the archive under the carry limit.
set -e
W=${1:-/work/bld}
O=${2:-$(cd "$(dirname "$0")/../.." && pwd)/.devcarry}
mkdir -p "$O"
cd "$W"
mkdir -p build
make -j"$(nproc)" CUDA=1 BUILD=build/s4 BIN=build/s4/minke-cuda build/s4/minke-cuda cuda-tests \
    NVCCFLAGS="-O3 -std=c++17 -Iinclude -Isrc -DMINKE_CUDA=1 -lineinfo --threads 0 \
    -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wno-unused-parameter" > build/device-build.log 2>&1 ||
    { tail -20 build/device-build.log; exit 1; }
S=build/s6
mkdir -p $S/bin $S/lib
[ -f $S/minke-cuda ] && cp $S/minke-cuda $S/minke-prev
cp build/s4/minke-cuda $S/minke-cuda
find build/s4/tests/cuda -maxdepth 1 -type f -perm -u+x -exec cp {} $S/bin/ \;
for l in $(ldd build/s4/minke-cuda | awk '/=>/{print $3}'); do
    case $(basename "$l") in
    libc.so*|libm.so*|libpthread*|ld-linux*|libdl*|librt*|libstdc++*|libgcc_s*|libcublas*|libcudart*|libnccl*) ;;
    *) cp -L "$l" $S/lib/ ;;
    esac
done
# the kernel tracer (device-session.sh trace): CUPTI opened at run time, so its headers suffice here
cc -O2 -fPIC -shared -I/usr/local/cuda/include tools/dev/ktrace.c -o $S/lib/ktrace.so -ldl ||
    echo "device-pack: no ktrace.so (cupti_activity.h missing?)"
strip -g $S/minke-cuda $S/minke-prev $S/bin/* 2>/dev/null || true
tar cf - $S | xz -9 > "$O/s6.tar.xz"
ls -la "$O/s6.tar.xz"
# The device tool's carry limit (64 MiB) counts the tracked tree too: a minke-prev whose
# device code differs everywhere (a change to cu_common.cuh) doubles the archive and can
# pass it; then pack minke-cuda, the test programs the call needs and lib/ without it.
TREE=$(git -C "$(dirname "$O")" ls-files -z 2>/dev/null | (cd "$(dirname "$O")" && xargs -0 -r du -cb 2>/dev/null) | tail -1 | cut -f1)
SZ=$(stat -c %s "$O/s6.tar.xz")
if [ -n "$TREE" ] && [ $((TREE + SZ)) -gt $((60 * 1024 * 1024)) ]; then
    echo "device-pack: the archive ($SZ bytes) and the tracked tree ($TREE bytes) come near the 64 MiB carry limit;" \
         "pack without $S/minke-prev (tar of the files the call needs)" >&2
fi
