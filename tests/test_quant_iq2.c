/* test_quant_iq2.c: IQ2_XXS specifics. The lattice table is data re-encoded
 * from ggml (src/quant/iq2xxs_grid.inc), so it is checked structurally, by a
 * hash of ggml's original 2048 bytes and by a few literal entries of ggml's
 * table; the sign table by its parity rule; a hand-built block decodes as
 * spec model.md §5.5 says; the quantizer keeps even sign parity and recovers
 * data that lies exactly on the lattice.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"
#include "testutil.h"


static void test_tables(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;   /* FNV-1a 64 over the table's little-endian bytes */
    for (int k = 0; k < 256; k++) {
        uint64_t v = iq2xxs_grid_data[k];
        for (int j = 0; j < 8; j++) {
            uint8_t b = (uint8_t)(v >> (8 * j));
            CHECK(b == 8 || b == 25 || b == 43, "grid %d byte %d = %d", k, j, b);
            h = (h ^ b) * 0x100000001b3ULL;
        }
        for (int m = 0; m < k; m++) CHECK(iq2xxs_grid_data[m] != v, "grid %d == grid %d", k, m);
    }
    CHECK(h == 0xbb4ee025b5ac6e8eULL, "grid hash %016llx differs from ggml's table", (unsigned long long)h);
    /* literal entries of ggml-common.h's iq2xxs_grid */
    CHECK(iq2xxs_grid_data[0] == 0x0808080808080808ULL, "grid[0]");
    CHECK(iq2xxs_grid_data[1] == 0x080808080808082bULL, "grid[1]");
    CHECK(iq2xxs_grid_data[100] == 0x08192b0808081908ULL, "grid[100]");
    CHECK(iq2xxs_grid_data[255] == 0x2b2b2b1908081908ULL, "grid[255]");
    CHECK(quant_iq2xxs_grid() == iq2xxs_grid_data && quant_iq2xxs_ksigns() == ksigns_iq2xs_data, "table accessors");
    CHECK(quant_mxfp4_kvalues()[7] == 12 && quant_mxfp4_kvalues()[15] == -12, "mxfp4 kvalues");
    for (int i = 0; i < 128; i++) {
        uint8_t s = ksigns_iq2xs_data[i];
        CHECK((s & 127) == i, "ksigns low bits %d", i);
        CHECK(__builtin_popcount(s) % 2 == 0, "ksigns parity %d", i);
    }
}

static void test_block(void)
{
    uint8_t blk[66];
    uint16_t d = f32_to_f16(0.75f);
    blk[0] = (uint8_t)d;
    blk[1] = (uint8_t)(d >> 8);
    for (int g = 0; g < 8; g++)
        for (int b = 0; b < 8; b++) blk[2 + 8 * g + b] = (uint8_t)test_rand();
    float out[256];
    quant_get(GGML_TYPE_IQ2_XXS)->dequant(blk, out, 256);
    for (int g = 0; g < 8; g++) {
        const uint8_t *p = blk + 2 + 8 * g;
        uint32_t w = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        float dg = 0.75f * (2 * (w >> 28) + 1) / 8.0f;
        for (int l = 0; l < 4; l++) {
            int si = (w >> (7 * l)) & 127;
            int S = si | ((__builtin_popcount(si) & 1) << 7);
            for (int j = 0; j < 8; j++) {
                int mag = (int)((iq2xxs_grid_data[p[l]] >> (8 * j)) & 0xFF);
                float want = dg * mag * ((S >> j) & 1 ? -1.0f : 1.0f);
                int e = 32 * g + 8 * l + j;
                CHECK(fabsf(out[e] - want) <= 1e-6f * fabsf(want), "iq2 elem %d: %g vs %g", e, out[e], want);
            }
        }
    }
}

static void test_quantizer(void)
{
    /* data exactly on the lattice: one d, per-group t, random points and even signs */
    uint8_t blk[66 * 4], blk2[66 * 4];
    float x[1024], y[1024];
    for (int b = 0; b < 4; b++) {
        uint16_t d = f32_to_f16(0.01f * (b + 1));
        blk[66 * b] = (uint8_t)d;
        blk[66 * b + 1] = (uint8_t)(d >> 8);
        for (int g = 0; g < 8; g++) {
            uint8_t *p = blk + 66 * b + 2 + 8 * g;
            for (int l = 0; l < 4; l++) p[l] = (uint8_t)test_rand();
            uint32_t w = (test_rand() & 0x0FFFFFFF) | ((uint32_t)(g == 0 ? 15 : test_rand() % 16) << 28);
            memcpy(p + 4, &w, 4);
        }
    }
    const quant_traits *t = quant_get(GGML_TYPE_IQ2_XXS);
    t->dequant(blk, x, 1024);
    t->quant(x, blk2, 1024);
    t->dequant(blk2, y, 1024);
    double e = 0, nx = 0;
    for (int i = 0; i < 1024; i++) { e += (double)(x[i] - y[i]) * (x[i] - y[i]); nx += (double)x[i] * x[i]; }
    CHECK(e <= 1e-4 * nx, "lattice data not recovered: rel err %g", e / nx);

    /* random data: signs decoded per 8 have even parity and follow x where |x| is not the smallest */
    for (int i = 0; i < 1024; i++) x[i] = (float)((int)(test_rand() % 20001) - 10000) / 5000.0f;
    t->quant(x, blk2, 1024);
    t->dequant(blk2, y, 1024);
    for (int s = 0; s < 128; s++) {
        int neg = 0, mismatch = 0;
        for (int j = 0; j < 8; j++) {
            neg += y[8 * s + j] < 0;
            mismatch += (y[8 * s + j] < 0) != (x[8 * s + j] < 0);
        }
        CHECK(neg % 2 == 0, "odd sign count in sub-group %d", s);
        CHECK(mismatch <= 1, "sub-group %d: %d signs differ from x", s, mismatch);
    }
}

int main(void)
{
    test_rand_seed(777);
    test_tables();
    test_block();
    test_quantizer();
    return test_finish("test_quant_iq2");
}
