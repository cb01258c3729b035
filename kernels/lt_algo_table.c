// The stored choices among cuBLASLt's heuristic candidates (lt_table.h), one line per GEMM whose best
// timed candidate beat the heuristic's first by at least LT_TUNE_MIN_GAIN in a tuning run. Lines are
// the tuning run's output (MEMOPT_GEMM_TUNE=1 memopt run ..., "lt-tune:" lines on stderr), pasted
// as they are; the run is named above each group. A key no line matches takes the heuristic's first.
#include "lt_table.h"

const mo_lt_choice mo_lt_table[] = {
    {NULL, 0, {0}, {0}, 0, 0.0f, 0.0f}, // end (C has no empty arrays)
};
const int mo_lt_table_n = (int)(sizeof mo_lt_table / sizeof mo_lt_table[0]) - 1;

int mo_lt_key_eq(const mo_lt_key *x, const mo_lt_key *y) {
    // field by field (no memcmp: padding bytes are unspecified)
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda &&
           x->ldb == y->ldb && x->ldd == y->ldd && x->aux_ld == y->aux_ld && x->ab_type == y->ab_type &&
           x->d_type == y->d_type && x->epilogue == y->epilogue && x->tf32 == y->tf32 &&
           x->beta_zero == y->beta_zero && x->has_bias == y->has_bias && x->has_aux == y->has_aux &&
           x->has_c == y->has_c && x->al_a == y->al_a && x->al_b == y->al_b && x->al_c == y->al_c &&
           x->al_d == y->al_d && x->al_bias == y->al_bias && x->al_aux == y->al_aux && x->ws_bytes == y->ws_bytes;
}
