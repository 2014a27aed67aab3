/* chainbench.cu: what a kernel boundary costs in a PDL chain, and what a
 * counter hand-off would cost instead (a measuring aid for issue #6; not
 * part of the engine).
 *
 * A graph of NK kernels on one stream; kernel k's blocks each read the whole
 * 4096-float output of kernel k - 1 (as a GEMV stages its input), sum it, and
 * write their slice of kernel k's output. Modes:
 *   0  plain stream order (no PDL attribute)
 *   1  PDL: griddepcontrol.wait, then launch_dependents (the backend's cu_pdl_enter)
 *   2  PDL launch, but instead of griddepcontrol.wait each block spins until
 *      kernel k - 1's blocks have all counted themselves done (threadfence,
 *      atomicAdd on a 64-bit counter, target epoch x blocks); then
 *      launch_dependents. Kernel 1 is launched without PDL after a kernel that
 *      advances the epoch, so the epoch is visible to every later kernel.
 *      Deadlock-free: kernel k is launched only once every block of kernel
 *      k - 1 has triggered, so all of them are resident or done.
 *   3  PDL: griddepcontrol.wait at the start, launch_dependents at the end
 *      (after the block's writes)
 *   5  PDL: griddepcontrol.wait only (the trigger implicit at the grid's exit)
 * Chains: every kernel with the same block count, and "alt S": S-block kernels
 * between 128-block ones (mode 4: the S-block kernels trigger at the end,
 * mode 6: they do not trigger; the others trigger at the start).
 * Every replay starts with k_epoch (a new epoch and a new input). Prints us a kernel for each (mode, blocks) and checks that modes 1 and 2
 * give mode 0's output bit for bit.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a tools/dev/chainbench.cu -o chainbench
 *   ./chainbench [NK] [reps]
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4096
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

/* a new epoch and a new input each replay (so a stale read of an earlier
 * replay's data would show in the output) */
__global__ void k_epoch(unsigned long long *epoch, const float *base, float *in0) {
    __shared__ unsigned long long e;
    if (threadIdx.x == 0) { e = *epoch + 1; *epoch = e; }
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += blockDim.x) in0[i] = base[i] + (float)(e % 97) * 1e-3f;
}

__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

template <int MODE>
__global__ void __launch_bounds__(256) k_step(const float *prev, float *out, const unsigned long long *epoch,
                                              const unsigned long long *cnt_prev, unsigned long long *cnt_own,
                                              int gprev) {
    __shared__ float red[8];
    __shared__ unsigned long long s_ep;
    if (MODE == 1 || MODE == 3 || MODE == 5) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        if (MODE == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    } else if (MODE == 99) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    } else if (MODE == 2) {
        if (threadIdx.x == 0) {
            const unsigned long long ep = *(volatile const unsigned long long *)epoch;
            s_ep = ep;
            if (cnt_prev) {
                const unsigned long long want = ep * (unsigned long long)gprev;
                while (ld_acquire(cnt_prev) < want) { }
            }
        }
        __syncthreads();
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
    float s = 0.f;
    for (int i = threadIdx.x; i < N; i += 256) s += prev[i];
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    float tot = 0.f;
    for (int w = 0; w < 8; w++) tot += red[w];
    const int per = N / gridDim.x;
    for (int i = threadIdx.x; i < per; i += 256) {
        const int j = blockIdx.x * per + i;
        out[j] = prev[j] * 0.999f + tot * 1e-7f;
    }
    if (MODE == 3) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (MODE == 2) {
        __syncthreads();
        if (threadIdx.x == 0) { __threadfence(); atomicAdd(cnt_own, 1ull); }
    }
}

static void launch(int mode, bool pdl, int g, cudaStream_t st, const float *prev, float *out,
                   const unsigned long long *ep, const unsigned long long *cp, unsigned long long *co, int gprev) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(g); cfg.blockDim = dim3(256); cfg.stream = st;
    if (pdl) {
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
    }
    if (mode == 0) CK(cudaLaunchKernelEx(&cfg, k_step<0>, prev, out, ep, cp, co, gprev));
    else if (mode == 1) CK(cudaLaunchKernelEx(&cfg, k_step<1>, prev, out, ep, cp, co, gprev));
    else if (mode == 2) CK(cudaLaunchKernelEx(&cfg, k_step<2>, prev, out, ep, cp, co, gprev));
    else if (mode == 3) CK(cudaLaunchKernelEx(&cfg, k_step<3>, prev, out, ep, cp, co, gprev));
    else CK(cudaLaunchKernelEx(&cfg, k_step<5>, prev, out, ep, cp, co, gprev));
}

int main(int argc, char **argv) {
    const int NK = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 50;
    float *buf, *base; unsigned long long *cnt, *ep;
    CK(cudaMalloc(&base, N * 4));
    CK(cudaMalloc(&buf, (size_t)(NK + 1) * N * 4));
    CK(cudaMalloc(&cnt, (size_t)(NK + 1) * 8));
    CK(cudaMalloc(&ep, 8));
    float *h0 = (float *)malloc(N * 4), *ref = (float *)malloc(N * 4), *got = (float *)malloc(N * 4);
    for (int i = 0; i < N; i++) h0[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int gs[] = {1, 128, -1, -2, -8, -32};     /* -S: alternate S and 128 */
    int bad = 0;
    for (int gi = 0; gi < 6; gi++) {
        const int g0 = gs[gi];
        for (int mode = 0; mode < 7; mode++) {
            if ((mode == 4 || mode == 6) && g0 > 0) continue;
            if ((mode == 2 || mode == 5) && g0 < 0) continue;
            CK(cudaMemcpy(base, h0, N * 4, cudaMemcpyHostToDevice));
            CK(cudaMemset(cnt, 0, (size_t)(NK + 1) * 8));
            CK(cudaMemset(ep, 0, 8));
            cudaGraph_t gr; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            k_epoch<<<1, 256, 0, st>>>(ep, base, buf);
            for (int k = 1; k <= NK; k++) {
                const int g = g0 > 0 ? g0 : (k & 1) ? -g0 : 128, gp = g0 > 0 ? g0 : (k & 1) ? 128 : -g0;
                const int m = mode == 4 ? ((k & 1) ? 3 : 1) : mode == 6 ? ((k & 1) ? 5 : 1) : mode;
                launch(m, mode != 0 && k > 1, g, st, buf + (size_t)(k - 1) * N, buf + (size_t)k * N, ep,
                       k > 1 ? cnt + k - 1 : NULL, cnt + k, gp);
            }
            CK(cudaStreamEndCapture(st, &gr));
            CK(cudaGraphInstantiate(&ge, gr, 0));
            CK(cudaGraphLaunch(ge, st));          /* warm */
            CK(cudaStreamSynchronize(st));
            CK(cudaEventRecord(e0, st));
            for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaStreamSynchronize(st));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            CK(cudaMemcpy(mode == 0 ? ref : got, buf + (size_t)NK * N, N * 4, cudaMemcpyDeviceToHost));
            int diff = 0;
            if (mode) for (int i = 0; i < N; i++) diff += memcmp(&ref[i], &got[i], 4) != 0;
            bad += diff;
            static const char *mn[] = {"plain", "pdl wait", "pdl + counter", "pdl, trigger at end", "pdl, small kernels trigger at end",
                                       "pdl, no trigger", "pdl, small kernels no trigger"};
            printf("blocks %s%d mode %d (%s): %.3f us a kernel%s\n", g0 > 0 ? "" : "alt ", g0 > 0 ? g0 : -g0,
                   mode, mn[mode], ms * 1e3 / ((double)reps * NK), mode ? (diff ? " OUTPUT DIFFERS" : ", output equal to plain") : "");
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr));
        }
    }
    printf("chainbench: %s\n", bad ? "OUTPUTS DIFFER" : "all outputs equal");
    return bad != 0;
}
