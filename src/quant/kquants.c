/* kquants.c: Q2_K and Q4_K (spec model.md §5.3, §5.4): decode, reference
 * quantizers and scalar dots against Q8_K activations (§5.6).
 *
 * Quantizer idea (same family as ggml's k-quant reference, written anew):
 * each sub-block is fitted as x ~ scale*L - min with L in 0..nmax and
 * min >= 0; we try a fan of candidate inverse scales around nmax/(max-min),
 * round, and solve the 2x2 least-squares problem for (scale, min) given the
 * codes, keeping the best. The sub-block scales and mins are then quantized
 * against the f16 super-scales d and dmin, and finally d/dmin are refitted by
 * least squares over the whole block with the small integer scales fixed and
 * the codes re-rounded (a step ggml's reference does not take; it lowers the
 * RMSE a little at no format cost).
 *
 * The fits are unweighted (plain squared error), unlike ggml's reference,
 * which weights by |x| (Q2_K) or rms+|x| (Q4_K). Unweighted error is what a
 * dot with an unknown activation sees; on Gaussian data it gives a lower
 * RMSE (docs/quant.md). fit_scale_min still takes weights for an imatrix.
 */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"


/* Fit x[i] ~ scale*L[i] - *min_out over n values with weights w (may be NULL);
 * codes 0..nmax. Returns scale (>= 0); *min_out >= 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *min_out, float rmin, float rdelta, int nstep)
{
    float xmin = x[0], xmax = x[0], sw = 0, swx = 0;
    for (int i = 0; i < n; i++) {
        float wi = w ? w[i] : 1.0f;
        if (x[i] < xmin) xmin = x[i];
        if (x[i] > xmax) xmax = x[i];
        sw += wi;
        swx += wi * x[i];
    }
    if (xmin > 0) xmin = 0;
    if (xmax <= xmin) {
        memset(L, 0, (size_t)n);
        *min_out = -xmin;
        return 0.0f;
    }
    float best_err = INFINITY, best_scale = (xmax - xmin) / nmax, best_off = xmin;
    uint8_t Laux[32];
    for (int is = -1; is <= nstep; is++) {
        float iscale = is < 0 ? nmax / (xmax - xmin) : (rmin + rdelta * is + nmax) / (xmax - xmin);
        float sl = 0, sll = 0, slx = 0;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(iscale * (x[i] - xmin), 0, nmax);
            float wi = w ? w[i] : 1.0f;
            Laux[i] = (uint8_t)l;
            sl += wi * l;
            sll += wi * l * l;
            slx += wi * l * x[i];
        }
        float D = sw * sll - sl * sl;
        if (D <= 0) continue;
        float scale = (sw * slx - swx * sl) / D;
        float off = (sll * swx - sl * slx) / D;
        if (off > 0) {          /* the format can only subtract a min */
            off = 0;
            scale = slx / sll;
        }
        if (scale < 0) continue;
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = scale * Laux[i] + off - x[i];
            err += (w ? w[i] : 1.0f) * diff * diff;
        }
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
            best_off = off;
            memcpy(L, Laux, (size_t)n);
        }
    }
    if (best_err == INFINITY) {  /* every candidate degenerate: plain range fit */
        float iscale = nmax / (xmax - xmin);
        for (int i = 0; i < n; i++) L[i] = (uint8_t)round_clamp(iscale * (x[i] - xmin), 0, nmax);
    }
    *min_out = -best_off;
    return best_scale;
}

/* Squared error of one sub-block coded with scale s and min m (codes into L). */
static float sub_err(const float *x, int len, int nmax, float s, float m, uint8_t *L)
{
    float err = 0, inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < len; i++) {
        int l = round_clamp((x[i] + m) * inv, 0, nmax);
        L[i] = (uint8_t)l;
        float diff = s * l - m - x[i];
        err += diff * diff;
    }
    return err;
}

/* Shared second stage for both k-quants: given per-sub-block (scale, min),
 * choose f16 d/dmin, integer sc/mn (0..qmax), codes L (0..nmax). Each round
 * re-picks every sub-block's integer pair among the neighbours of its current
 * one (exact error with re-rounded codes), then refits d and dmin by least
 * squares over the block; the best round is kept. nsub sub-blocks of len. */
static void kquant_block(const float *x, int nsub, int len, int nmax, int qmax,
                         const float *scales, const float *mins,
                         uint16_t *d_out, uint16_t *dmin_out, uint8_t *sc, uint8_t *mn, uint8_t *L)
{
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < nsub; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float d = max_scale / qmax, dmin = max_min / qmax;
    uint16_t dh = f16_scale(d), dmh = f16_scale(dmin);
    float dq = f16_to_f32(dh), dmq = f16_to_f32(dmh);
    for (int j = 0; j < nsub; j++) {
        sc[j] = (uint8_t)(dq > 0 ? round_clamp(scales[j] / dq, 0, qmax) : 0);
        mn[j] = (uint8_t)(dmq > 0 ? round_clamp(mins[j] / dmq, 0, qmax) : 0);
    }
    float best_err = INFINITY;
    uint16_t best_d = 0, best_dmin = 0;
    uint8_t Lbest[256], scbest[16], mnbest[16], Ltmp[32];
    for (int iter = 0; iter < 3; iter++) {
        dh = f16_scale(d);
        dmh = f16_scale(dmin);
        dq = f16_to_f32(dh);
        dmq = f16_to_f32(dmh);
        float err = 0, saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
        for (int j = 0; j < nsub; j++) {
            const float *xs = x + j * len;
            /* integer scale/min pair: current one and its neighbours */
            int bs = sc[j], bm = mn[j];
            float be = sub_err(xs, len, nmax, dq * bs, dmq * bm, L + j * len);
            for (int ds = -1; ds <= 1; ds++)
                for (int dm = -1; dm <= 1; dm++) {
                    int cs = sc[j] + ds, cm = mn[j] + dm;
                    if ((ds == 0 && dm == 0) || cs < 0 || cs > qmax || cm < 0 || cm > qmax) continue;
                    float e = sub_err(xs, len, nmax, dq * cs, dmq * cm, Ltmp);
                    if (e < be) { be = e; bs = cs; bm = cm; memcpy(L + j * len, Ltmp, (size_t)len); }
                }
            sc[j] = (uint8_t)bs;
            mn[j] = (uint8_t)bm;
            err += be;
            for (int i = 0; i < len; i++) {
                float a = (float)(bs * L[j * len + i]), b = -(float)bm;
                saa += a * a; sab += a * b; sbb += b * b;
                sax += a * xs[i]; sbx += b * xs[i];
            }
        }
        if (err < best_err) {
            best_err = err;
            best_d = dh;
            best_dmin = dmh;
            memcpy(Lbest, L, (size_t)(nsub * len));
            memcpy(scbest, sc, (size_t)nsub);
            memcpy(mnbest, mn, (size_t)nsub);
        }
        float D = saa * sbb - sab * sab;
        if (D <= 0) break;
        float nd = (sax * sbb - sbx * sab) / D, ndm = (saa * sbx - sab * sax) / D;
        if (ndm < 0) { ndm = 0; nd = saa > 0 ? sax / saa : 0; }
        if (nd <= 0) break;
        d = nd;
        dmin = ndm;
    }
    *d_out = best_d;
    *dmin_out = best_dmin;
    memcpy(L, Lbest, (size_t)(nsub * len));
    memcpy(sc, scbest, (size_t)nsub);
    memcpy(mn, mnbest, (size_t)nsub);
}

/* ---------------- Q2_K ---------------- */

void dequant_q2_K(const void *src, float *dst, int64_t n)
{
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        float *y = dst + 256 * i;
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int l = 0; l < 32; l++) {
                    int e = 128 * h + 32 * s + l;
                    int sb = e / 16;
                    int c = (b[i].qs[32 * h + l] >> (2 * s)) & 3;
                    y[e] = d * (b[i].scales[sb] & 0xF) * c - dmin * (b[i].scales[sb] >> 4);
                }
    }
}

void quant_q2_K(const float *src, void *dst, int64_t n)
{
    block_q2_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        float scales[16], mins[16];
        uint8_t L[256], sc[16], mn[16];
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_min(16, 3, x + 16 * j, NULL, L + 16 * j, &mins[j], -0.5f, 0.1f, 15);
        }
        kquant_block(x, 16, 16, 3, 15, scales, mins, &b[i].d, &b[i].dmin, sc, mn, L);
        for (int j = 0; j < 16; j++) b[i].scales[j] = (uint8_t)(sc[j] | (mn[j] << 4));
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int e = 0; e < 256; e++) {
            int h = e / 128, s = (e % 128) / 32, l = e % 32;
            b[i].qs[32 * h + l] |= (uint8_t)(L[e] << (2 * s));
        }
    }
}

void dot_q2_K_q8_K_scalar(int64_t n, float *s, const void *w, const void *a)
{
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < 16; sb++) msum += (x[i].scales[sb] >> 4) * y[i].bsums[sb];
        for (int h = 0; h < 2; h++)
            for (int s4 = 0; s4 < 4; s4++)
                for (int half = 0; half < 2; half++) {
                    int sb = 8 * h + 2 * s4 + half, part = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        part += ((x[i].qs[32 * h + l] >> (2 * s4)) & 3) * y[i].q[128 * h + 32 * s4 + l];
                    isum += (x[i].scales[sb] & 0xF) * part;
                }
        sum += y[i].d * f16_to_f32(x[i].d) * (float)isum - y[i].d * f16_to_f32(x[i].dmin) * (float)msum;
    }
    *s = sum;
}

/* ---------------- Q4_K ---------------- */

void dequant_q4_K(const void *src, float *dst, int64_t n)
{
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4_K_scale_min(j, b[i].scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                int c = (b[i].qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0xF;
                dst[256 * i + 32 * j + l] = d * sc * c - dmin * m;
            }
        }
    }
}

void quant_q4_K(const float *src, void *dst, int64_t n)
{
    block_q4_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        float scales[8], mins[8];
        uint8_t L[256], sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            scales[j] = fit_scale_min(32, 15, xs, NULL, L + 32 * j, &mins[j], -1.0f, 0.1f, 20);
        }
        kquant_block(x, 8, 32, 15, 63, scales, mins, &b[i].d, &b[i].dmin, sc, mn, L);
        for (int j = 0; j < 4; j++) {
            b[i].scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
            b[i].scales[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
            b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
        }
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * k + l] = (uint8_t)(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
    }
}

void dot_q4_K_q8_K_scalar(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4_K_scale_min(j, x[i].scales, &sc, &m);
            int part = 0;
            for (int l = 0; l < 32; l++)
                part += ((x[i].qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0xF) * y[i].q[32 * j + l];
            isum += sc * part;
            msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += y[i].d * f16_to_f32(x[i].d) * (float)isum - y[i].d * f16_to_f32(x[i].dmin) * (float)msum;
    }
    *s = sum;
}
