/* policy.c: output types per tensor role for convert and mkmodel (see policy.h). */
#include "convert/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

const char policy_experts_names[] = "iq2xxs-q2k|q4k|mxfp4|q8_0|f16|f32";
const char policy_dense_names[] = "q8_0|f16|bf16|f32";

void policy_default(convert_policy *p) {
    memset(p, 0, sizeof *p);
    p->expert_gateup = GGML_TYPE_IQ2_XXS;
    p->expert_down = GGML_TYPE_Q2_K;
    p->dense = GGML_TYPE_Q8_0;
    p->small_f32 = 0;
}

int policy_set_experts(convert_policy *p, const char *name) {
    static const struct { const char *name; int gateup, down; } t[] = {
        {"iq2xxs-q2k", GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K}, {"q2", GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K},
        {"q4k", GGML_TYPE_Q4_K, GGML_TYPE_Q4_K}, {"q4", GGML_TYPE_Q4_K, GGML_TYPE_Q4_K},
        {"mxfp4", GGML_TYPE_MXFP4, GGML_TYPE_MXFP4}, {"q8_0", GGML_TYPE_Q8_0, GGML_TYPE_Q8_0},
        {"f16", GGML_TYPE_F16, GGML_TYPE_F16}, {"f32", GGML_TYPE_F32, GGML_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(name, t[i].name)) {
            p->expert_gateup = t[i].gateup;
            p->expert_down = t[i].down;
            return 0;
        }
    return -1;
}

int policy_add_layer_experts(convert_policy *p, const char *spec) {
    if (p->n_overrides >= POLICY_MAX_OVERRIDES) return -1;
    char *end;
    long a = strtol(spec, &end, 10), b = a;
    if (end == spec || a < 0) return -1;
    if (*end == '-') {
        const char *q = end + 1;
        b = strtol(q, &end, 10);
        if (end == q || b < a) return -1;
    }
    if (*end != '=') return -1;
    convert_policy tmp = *p;
    if (policy_set_experts(&tmp, end + 1) != 0) return -1;
    p->overrides[p->n_overrides].from = (int)a;
    p->overrides[p->n_overrides].to = (int)b;
    p->overrides[p->n_overrides].gateup = tmp.expert_gateup;
    p->overrides[p->n_overrides].down = tmp.expert_down;
    p->n_overrides++;
    return 0;
}

int policy_set_dense(convert_policy *p, const char *name) {
    static const struct { const char *name; int type; } t[] = {
        {"q8_0", GGML_TYPE_Q8_0}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16}, {"f32", GGML_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(name, t[i].name)) {
            p->dense = t[i].type;
            p->small_f32 = t[i].type == GGML_TYPE_F32;
            return 0;
        }
    return -1;
}

int policy_type(const convert_policy *p, const dsv4_tensor_spec *s) {
    if (s->role == DSV4_ROLE_EXPERT_GATEUP || s->role == DSV4_ROLE_EXPERT_DOWN) {
        int gu = p->expert_gateup, dn = p->expert_down;
        for (int i = 0; i < p->n_overrides; i++)
            if (s->layer >= p->overrides[i].from && s->layer <= p->overrides[i].to) {
                gu = p->overrides[i].gateup;
                dn = p->overrides[i].down;
            }
        return s->role == DSV4_ROLE_EXPERT_GATEUP ? gu : dn;
    }
    switch (s->role) {
    case DSV4_ROLE_DENSE: return p->dense;
    case DSV4_ROLE_EMBED:
    case DSV4_ROLE_HC_FN:
    case DSV4_ROLE_SMALL_F16: return p->small_f32 ? GGML_TYPE_F32 : s->ds4_type;
    default: return s->ds4_type;
    }
}

int policy_check(const convert_policy *p, const dsv4_tensor_spec *specs, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        int t = policy_type(p, &specs[i]);
        const quant_traits *q = quant_get(t);
        if (!q || (t != GGML_TYPE_I32 && !q->quant)) {
            snprintf(err, errlen, "%s: type %s is not available in this build", specs[i].name, quant_name(t));
            return -1;
        }
        if (specs[i].ne[0] % (uint64_t)q->blck) {
            snprintf(err, errlen, "%s: row length %llu is not a multiple of the %s block size %d; choose another type policy",
                     specs[i].name, (unsigned long long)specs[i].ne[0], q->name, q->blck);
            return -1;
        }
    }
    return 0;
}
