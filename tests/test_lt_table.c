// The stored cuBLASLt choices (kernels/lt_algo_table.c, lt_table.h): the key comparison sees every
// field (a choice must never apply to a GEMM it was not timed for), and the table is well formed: a
// device and a version on every line, sane shapes, and no key twice for one device and version (which
// line would win would be an accident of order).
#include <string.h>
#include "kernels/lt_table.h"
#include "tests/testlib.h"

static mo_lt_key base_key(void) {
    mo_lt_key k;
    memset(&k, 0, sizeof k);
    k.ta = 1; k.tb = 0; k.m = 2304; k.n = 8192; k.k = 768; k.lda = 768; k.ldb = 768; k.ldd = 2304; k.aux_ld = 0;
    k.ab_type = 0; k.d_type = 0; k.epilogue = 4; k.tf32 = 0; k.beta_zero = 1; k.has_bias = 1; k.has_aux = 0;
    k.has_c = 0; k.al_a = k.al_b = k.al_c = k.al_d = k.al_bias = k.al_aux = 256; k.ws_bytes = 32u << 20;
    return k;
}

static void key_eq_sees_every_field(void) {
    const mo_lt_key a = base_key();
    mo_lt_key b = a;
    CHECK(mo_lt_key_eq(&a, &b));
    // one field changed at a time: each must make the keys differ
#define DIFFERS(field, value)                                                                   \
    do {                                                                                        \
        b = a;                                                                                  \
        b.field = (value);                                                                      \
        CHECK_MSG(!mo_lt_key_eq(&a, &b), "mo_lt_key_eq ignores " #field);                       \
    } while (0)
    DIFFERS(ta, 0); DIFFERS(tb, 1); DIFFERS(m, 2305); DIFFERS(n, 4096); DIFFERS(k, 3072); DIFFERS(lda, 769);
    DIFFERS(ldb, 770); DIFFERS(ldd, 2305); DIFFERS(aux_ld, 1); DIFFERS(ab_type, 14); DIFFERS(d_type, 14);
    DIFFERS(epilogue, 1); DIFFERS(tf32, 1); DIFFERS(beta_zero, 0); DIFFERS(has_bias, 0); DIFFERS(has_aux, 1);
    DIFFERS(has_c, 1); DIFFERS(al_a, 16); DIFFERS(al_b, 16); DIFFERS(al_c, 16); DIFFERS(al_d, 16);
    DIFFERS(al_bias, 16); DIFFERS(al_aux, 16); DIFFERS(ws_bytes, 1u << 20);
#undef DIFFERS
}

static void table_well_formed(void) {
    printf("stored cuBLASLt choices: %d\n", mo_lt_table_n);
    for (int i = 0; i < mo_lt_table_n; i++) {
        const mo_lt_choice *t = &mo_lt_table[i];
        const mo_lt_key *k = &t->key;
        CHECK_MSG(t->device && t->device[0], "line %d: no device", i);
        CHECK_MSG(t->cublaslt_version > 0, "line %d: no cuBLASLt version", i);
        CHECK_MSG(k->m > 0 && k->n > 0 && k->k > 0, "line %d: shape %d x %d x %d", i, k->m, k->n, k->k);
        // the stored (column-major) operands: A is (m, k) or, transposed, (k, m), so lda covers its rows
        CHECK_MSG(k->lda >= (k->ta ? k->k : k->m) && k->ldb >= (k->tb ? k->n : k->k) && k->ldd >= k->m,
                  "line %d: leading dimensions %lld %lld %lld too small", i, (long long)k->lda, (long long)k->ldb,
                  (long long)k->ldd);
        // rank: its place in the heuristic's list (never 0, the first itself), or -1 when the per-algorithm
        // search of MEMOPT_GEMM_TUNE=2 found it outside that list
        CHECK_MSG((t->rank > 0 || t->rank == -1) && t->best_ms > 0 && t->best_ms < t->heur_ms,
                  "line %d: rank %d, %.4f ms against the first's %.4f (a stored choice must have beaten it)", i,
                  t->rank, t->best_ms, t->heur_ms);
        for (int j = 0; j < i; j++)
            CHECK_MSG(!(strcmp(mo_lt_table[j].device, t->device) == 0 &&
                        mo_lt_table[j].cublaslt_version == t->cublaslt_version && mo_lt_key_eq(&mo_lt_table[j].key, k)),
                      "lines %d and %d: the same key", j, i);
    }
    CHECK(mo_lt_table[mo_lt_table_n].device == NULL); // the end marker
}

int main(void) {
    key_eq_sees_every_field();
    table_well_formed();
    return test_finish();
}
