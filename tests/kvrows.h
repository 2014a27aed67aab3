/* kvrows.h: random KV rows for the KV row format checks (test_numerics.c on
 * the CPU, cuda/kvfmt_check.c on the GPU): blocks of one kind each, wide
 * magnitudes (1e-12 .. 1e6, a tenth of the values 30x larger), all-zero,
 * all -0 and blocks starting with -0. A xorshift generator the caller seeds.
 */
#ifndef MINKE_TESTS_KVROWS_H
#define MINKE_TESTS_KVROWS_H
#include <math.h>
#include <stdint.h>

static uint64_t kvrows_rng;
static double kvrows_u01(void) {
    kvrows_rng ^= kvrows_rng << 13; kvrows_rng ^= kvrows_rng >> 7; kvrows_rng ^= kvrows_rng << 17;
    return (double)(kvrows_rng >> 11) * (1.0 / 9007199254740992.0);
}
static void kvrows_random(float *x, int n, int blk) {
    for (int b = 0; b < n / blk; b++) {
        double mag = pow(10.0, -12.0 + 18.0 * kvrows_u01());
        int kind = (int)(kvrows_u01() * 8);
        for (int i = 0; i < blk; i++) {
            double v = (kvrows_u01() * 2.0 - 1.0) * mag * (kvrows_u01() < 0.1 ? 30.0 : 1.0);
            x[b * blk + i] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : (float)v;
        }
        if (kind == 2) x[b * blk] = -0.0f;
    }
}
#endif
