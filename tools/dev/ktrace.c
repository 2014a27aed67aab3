/* ktrace.c: a preloaded library that records every kernel a process runs,
 * graph-launched ones included (each node of a decode step's graph), with its
 * GPU start and end times, through CUPTI's activity API, and writes them as
 * CSV when the process exits. The lent GPU machine has ncu but no nsys, and
 * ncu times kernels one at a time with graphs off; this shows the step as
 * the graph runs it: the gaps between dependent kernels and how the side
 * streams overlap the main one (tools/dev/ktrace_step.py reads the CSV).
 *
 *   cc -O2 -fPIC -shared -I/usr/local/cuda/include tools/dev/ktrace.c -o ktrace.so -ldl
 *   KTRACE_CUPTI=/path/libcupti.so KTRACE_OUT=trace.csv LD_PRELOAD=./ktrace.so minke bench ...
 *
 * CUPTI is opened with dlopen (the path from KTRACE_CUPTI), so building
 * needs only its headers. The record is read as CUpti_ActivityKernel10; the
 * fields used here sit at the same offsets in the earlier versions CUPTI 12
 * fills (later versions only append). */
#define _GNU_SOURCE
#include <cupti_activity.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef CUptiResult (*register_fn)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*enable_fn)(CUpti_ActivityKind);
typedef CUptiResult (*next_fn)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*flush_fn)(uint32_t);

static FILE *out;
static next_fn next_record;
static flush_fn flush_all;

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = (size_t)16 << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    CUpti_Activity *r = NULL;
    while (next_record(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        fprintf(out, "%llu,%llu,%u,%llu,%d,%d,%u,%s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                k->streamId, (unsigned long long)k->graphNodeId, k->gridX * k->gridY * k->gridZ, k->blockX,
                (unsigned)k->registersPerThread, k->name ? k->name : "?");
    }
    free(buf);
}

__attribute__((constructor)) static void ktrace_start(void) {
    const char *lib = getenv("KTRACE_CUPTI");
    void *h = dlopen(lib && *lib ? lib : "libcupti.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) { fprintf(stderr, "ktrace: %s\n", dlerror()); return; }
    register_fn reg = (register_fn)dlsym(h, "cuptiActivityRegisterCallbacks");
    enable_fn enable = (enable_fn)dlsym(h, "cuptiActivityEnable");
    next_record = (next_fn)dlsym(h, "cuptiActivityGetNextRecord");
    flush_all = (flush_fn)dlsym(h, "cuptiActivityFlushAll");
    if (!reg || !enable || !next_record || !flush_all) { fprintf(stderr, "ktrace: CUPTI symbols missing\n"); return; }
    const char *path = getenv("KTRACE_OUT");
    out = fopen(path && *path ? path : "ktrace.csv", "w");
    if (!out) { perror("ktrace"); return; }
    fprintf(out, "start_ns,end_ns,stream,graph_node,blocks,threads,regs,name\n");
    if (reg(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        fprintf(stderr, "ktrace: CUPTI refused the kernel activity\n");
}

__attribute__((destructor)) static void ktrace_stop(void) {
    if (!out) return;
    flush_all(1);
    fclose(out);
    out = NULL;
}
