/* policy.h: the output type of every tensor when converting or generating
 * a model (`--experts`, `--dense`). Shared by `minke convert` and
 * `minke mkmodel` so both name and apply the policies the same way.
 *
 * Default = ds4's q2 layout (spec model.md §4.3): IQ2_XXS gate/up, Q2_K down,
 * Q8_0 dense matrices, F16/F32 small tensors as §4.1/§4.2 list them.
 */
#ifndef MINKE_CONVERT_POLICY_H
#define MINKE_CONVERT_POLICY_H

#include <stddef.h>

#include "model/config.h"

#define POLICY_MAX_OVERRIDES 8

typedef struct convert_policy {
    int expert_gateup;   /* ggml type of ffn_gate_exps / ffn_up_exps */
    int expert_down;     /* ggml type of ffn_down_exps */
    /* per-layer expert types (like ds4's spliced q2/q4 files); the last matching range wins */
    int n_overrides;
    struct { int from, to, gateup, down; } overrides[POLICY_MAX_OVERRIDES];
    int dense;           /* ggml type of the Q8_0 role (attention, shared experts, output) */
    int small_f32;       /* 1: the F16 small tensors (embedding, HC fn, compressor, indexer,
                            router) become F32 too, so an F32 twin is exact */
} convert_policy;

/* The ds4 q2 layout. */
void policy_default(convert_policy *p);
/* "iq2xxs-q2k" | "q4k" | "mxfp4" | "q8_0" | "f16" | "f32"; 0 ok, -1 unknown. */
int policy_set_experts(convert_policy *p, const char *name);
/* "A-B=TYPE" (or "A=TYPE"): routed experts of layers A..B use TYPE (an --experts name). 0 ok, -1 bad. */
int policy_add_layer_experts(convert_policy *p, const char *spec);
/* "q8_0" | "f16" | "bf16" | "f32" (f32 also sets small_f32); 0 ok, -1 unknown. */
int policy_set_dense(convert_policy *p, const char *name);
/* Help text listing the accepted names. */
extern const char policy_experts_names[], policy_dense_names[];

/* The type for one tensor under the policy. */
int policy_type(const convert_policy *p, const dsv4_tensor_spec *s);
/* Check every tensor's row length fits its policy type's block size; 0 ok, -1 with err. */
int policy_check(const convert_policy *p, const dsv4_tensor_spec *specs, int n, char *err, size_t errlen);

#endif
