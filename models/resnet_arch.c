// The ResNet's layer list (resnet_arch.h says the layout and the dimension flags).
#include "models/resnet_arch.h"

#include <stdlib.h>
#include <string.h>

mo_status rn_depth_blocks(int D, int nblk[4], int *bottleneck) {
    static const struct { int d, bn, n[4]; } tv[] = {
        {18, 0, {2, 2, 2, 2}}, {34, 0, {3, 4, 6, 3}}, {50, 1, {3, 4, 6, 3}},
        {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
    };
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++)
        if (tv[i].d == D) { memcpy(nblk, tv[i].n, sizeof tv[i].n); *bottleneck = tv[i].bn; return MO_OK; }
    int n = 0;
    if (D >= 10 && D < 50 && (D - 2) % 8 == 0) { n = (D - 2) / 8; *bottleneck = 0; }
    else if (D >= 14 && (D - 2) % 12 == 0) { n = (D - 2) / 12; *bottleneck = 1; }
    else
        return MO_FAIL(MO_ERR_INVALID, "--layers %d: not a ResNet depth (accepted: 18, 34, 50, 101, 152; 8n+2 below 50 "
                                       "for n basic blocks a stage; 12n+2 for n bottleneck blocks a stage)", D);
    for (int s = 0; s < 4; s++) nblk[s] = n;
    return MO_OK;
}

void rn_arch_free(rn_arch *a) {
    free(a->units);
    free(a->blocks);
    a->units = NULL;
    a->blocks = NULL;
}

static int add_unit(rn_arch *a, size_t *off, size_t *rs, int cin, int cout, int R, int stride, int H) {
    rn_unit *u = &a->units[a->nunits];
    u->cin = cin; u->cout = cout; u->R = R; u->stride = stride; u->pad = R / 2; u->H = H;
    u->P = (H + 2 * u->pad - R) / stride + 1;
    u->w_off = *off; *off += (size_t)cout * R * R * cin;
    u->g_off = *off; *off += (size_t)cout;
    u->b_off = *off; *off += (size_t)cout;
    u->rs_off = *rs; *rs += 2 * (size_t)cout;
    return a->nunits++;
}

mo_status rn_arch_build(const mo_run_config *rc, rn_arch *a) {
    memset(a, 0, sizeof *a);
    a->depth = rc->layers; a->W0 = rc->hidden; a->S = rc->input; a->K = rc->classes;
    MO_TRY(rn_depth_blocks(a->depth, a->nblk, &a->bottleneck));
    for (int s = 0; s < 4; s++) a->nblocks += a->nblk[s];
    a->units = calloc((size_t)(1 + 4 * a->nblocks), sizeof *a->units);
    a->blocks = calloc((size_t)a->nblocks, sizeof *a->blocks);
    if (!a->units || !a->blocks) { rn_arch_free(a); return MO_FAIL(MO_ERR_OOM, "host memory exhausted for the layer list"); }
    size_t off = 0, rs = 0;
    int stem = add_unit(a, &off, &rs, 3, a->W0, 7, 2, a->S);
    a->pool_H = a->units[stem].P;
    a->pool_P = (a->pool_H + 2 - 3) / 2 + 1;
    int H = a->pool_P, cin = a->W0, e = a->bottleneck ? 4 : 1, b = 0;
    for (int s = 0; s < 4; s++) {
        int w = a->W0 << s;
        for (int i = 0; i < a->nblk[s]; i++, b++) {
            rn_block *k = &a->blocks[b];
            int st = (s > 0 && i == 0) ? 2 : 1;
            k->cin = cin; k->cout = w * e; k->H = H;
            if (a->bottleneck) {
                k->u[0] = add_unit(a, &off, &rs, cin, w, 1, 1, H);
                k->u[1] = add_unit(a, &off, &rs, w, w, 3, st, H);
                k->u[2] = add_unit(a, &off, &rs, w, w * e, 1, 1, a->units[k->u[1]].P);
                k->nu = 3;
            } else {
                k->u[0] = add_unit(a, &off, &rs, cin, w, 3, st, H);
                k->u[1] = add_unit(a, &off, &rs, w, w, 3, 1, a->units[k->u[0]].P);
                k->nu = 2;
            }
            k->P = a->units[k->u[k->nu - 1]].P;
            k->ds = (st != 1 || cin != w * e) ? add_unit(a, &off, &rs, cin, w * e, 1, st, H) : -1;
            cin = w * e;
            H = k->P;
        }
    }
    a->Cf = cin; a->Pf = H;
    a->fc_w = off; off += (size_t)a->K * cin;
    a->fc_b = off; off += (size_t)a->K;
    a->n_params = off;
    a->n_running = rs;
    return MO_OK;
}
