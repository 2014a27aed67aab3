/* cu_device.cu: what `minke bench` asks of the device itself, model or not:
 * its name and size, the measured copy bandwidth (the ceiling of the decode
 * figures' "fraction of the limit"), and the GPU count.
 */
#include <stdio.h>
#include <cuda_runtime.h>

#include "cuda/cu_backend.h"

extern "C" int cu_device_info(char *buf, size_t n, double *bw_gbs) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return -1;
    snprintf(buf, n, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor, p.multiProcessorCount,
             p.totalGlobalMem / 1073741824.0);
    if (bw_gbs) {
        /* measured device-to-device copy bandwidth (read + write) */
        size_t bytes = 1ull << 30;
        void *a = NULL, *b = NULL;
        *bw_gbs = 0;
        if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0); cudaEventCreate(&e1);
            cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e0);
            for (int i = 0; i < 10; i++) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            *bw_gbs = 10.0 * 2 * bytes / (ms * 1e-3) / 1e9;
            cudaEventDestroy(e0); cudaEventDestroy(e1);
        }
        cudaFree(a); cudaFree(b);
    }
    return 0;
}

extern "C" int cu_gpu_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
