// The checkpoint segments of L blocks (ckpt_layout.h says which layout each policy has, and why).
#include "models/ckpt_layout.h"

#include <math.h>

mo_ckpt_layout mo_ckpt_layout_of(mo_ckpt_kind kind, int k, int L) {
    mo_ckpt_layout y = {0, 0};
    if (L < 1) return y;
    switch (kind) {
    case MO_CKPT_FULL: y.len = 1; y.blocks = L; break;
    case MO_CKPT_EVERY: y.len = k < L ? k : L; y.blocks = y.len > 0 ? L : 0; break;
    case MO_CKPT_SQRT: { int s = (int)ceil(sqrt((double)L)); y.len = s < 1 ? 1 : s; y.blocks = L; break; }
    case MO_CKPT_SEGMENTS: {
        int n = k < 1 ? 1 : k > L ? L : k;
        y.len = L / n;              // checkpoint_sequential's segment_size = len(functions) // segments
        y.blocks = (n - 1) * y.len; // its first segments - 1 segments; the last runs unchecked
        if (!y.blocks) y.len = 0;
        break;
    }
    default: break;
    }
    return y;
}

int mo_ckpt_layout_segments(mo_ckpt_layout y) { return y.len > 0 ? (y.blocks + y.len - 1) / y.len : 0; }
