/* tables.h: the decoder tables a CUDA check uploads before it runs kernels,
 * built as the backend builds them (src/cuda/cu_backend.cu): the IQ2_XXS grid
 * read back from the CPU decoder (scale 1.0 x 0.875), the sign bytes with
 * their parity bit, the MXFP4 values x 2. One copy for the check programs
 * (each is one .c file, so the function is static). */
#ifndef MINKE_TESTS_CUDA_TABLES_H
#define MINKE_TESTS_CUDA_TABLES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"

static void cu_check_tables(void) {
    static int ready = 0;
    if (ready) return;
    uint64_t grid[256]; uint8_t signs[128]; int8_t kv[16];
    const quant_traits *iq = quant_get(GGML_TYPE_IQ2_XXS), *mx = quant_get(GGML_TYPE_MXFP4);
    for (int k = 0; k < 256; k++) {
        uint8_t blk[66] = {0}; float out[256];
        blk[1] = 0x3C; blk[2] = (uint8_t)k; blk[9] = 0x30;
        iq->dequant(blk, out, 256);
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)(uint8_t)lrintf(out[j] / 0.875f) << (8 * j);
        grid[k] = v;
    }
    for (int i = 0; i < 128; i++) signs[i] = (uint8_t)(i | ((__builtin_popcount(i) & 1) << 7));
    for (int i = 0; i < 16; i++) {
        uint8_t blk[17] = {0}; float out[32];
        blk[0] = 128; blk[1] = (uint8_t)i;
        mx->dequant(blk, out, 32);
        kv[i] = (int8_t)lrintf(out[0]);
    }
    if (cu_tables_init(grid, signs, kv)) { printf("FAIL tables\n"); exit(1); }
    ready = 1;
}

#endif
