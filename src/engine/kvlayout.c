/* kvlayout.c: the backend-neutral KV state payload layout (engine/backend.h,
 * spec §15), so snapshots and serialised sessions move between backends. */
#include "engine/backend.h"

uint64_t minke_kv_layout(const dsv4_config *c, int pos, minke_kv_layer_layout *layout) {
    uint64_t off = 0;
    uint64_t Dh = c->head_dim, ihd = c->indexer_head_dim;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        minke_kv_layer_layout *L = &layout[il];
        int r = (int)c->compress_ratio[il];
        L->ratio = r;
        L->n_raw = pos < (int)c->sliding_window ? pos : (int)c->sliding_window;
        L->n_comp = r ? pos / r : 0;
        L->n_index = r == 4 ? pos / 4 : 0;
        L->state_rows = r == 4 ? 8 : r;
        L->state_width = r == 4 ? 2 * (int)Dh : r ? (int)Dh : 0;
        L->istate_rows = r == 4 ? 8 : 0;
        L->istate_width = r == 4 ? 2 * (int)ihd : 0;
        L->off_raw = off;
        off += (uint64_t)L->n_raw * Dh * 4;
        L->off_comp = off;
        off += (uint64_t)L->n_comp * Dh * 4;
        L->off_index = off;
        off += (uint64_t)L->n_index * ihd * 4;
        uint64_t sb = (uint64_t)L->state_rows * L->state_width * 4;
        L->off_comp_kv = off;
        off += sb;
        L->off_comp_sc = off;
        off += sb;
        uint64_t ib = (uint64_t)L->istate_rows * L->istate_width * 4;
        L->off_index_kv = off;
        off += ib;
        L->off_index_sc = off;
        off += ib;
        L->end = off;
    }
    return off;
}
