// The stored choices among cuBLASLt's algorithms (lt_algo_table.c) and the plan key they are keyed
// by: plain C, so the table builds and is tested without CUDA. Used by lt_gemm_cuda.c.
#ifndef MEMOPT_LT_TABLE_H
#define MEMOPT_LT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The plan key of a GEMM (every field of mo_lt_gemm but the data pointers and beta's value; see
// mo_lt_matmul), in plain integers so that the stored table below is plain C data. Field order is the
// table's initializer order.
typedef struct mo_lt_key {
    int ta, tb; // cublasOperation_t
    int m, n, k;
    int64_t lda, ldb, ldd, aux_ld;
    int ab_type, d_type; // cudaDataType_t
    int epilogue;        // cublasLtEpilogue_t
    int tf32, beta_zero, has_bias, has_aux, has_c;
    uint32_t al_a, al_b, al_c, al_d, al_bias, al_aux;
    size_t ws_bytes;
} mo_lt_key;

// An algorithm as cuBLASLt's configuration attributes (CUBLASLT_ALGO_CONFIG_*): ID, TILE_ID,
// SPLITK_NUM, REDUCTION_SCHEME, CTA_SWIZZLING, CUSTOM_OPTION, STAGES_ID, INNER_SHAPE_ID,
// CLUSTER_SHAPE_ID.
typedef struct mo_lt_algo_cfg {
    int id, tile, splitk, reduction, swizzle, custom, stages, inner, cluster;
} mo_lt_algo_cfg;

// A stored choice (kernels/lt_algo_table.c): on this device (cudaDeviceProp.name) with this cuBLASLt
// (cublasLtGetVersion()), the GEMM of this key runs the heuristic candidate with this configuration
// instead of the heuristic's first. Written by a tuning run (MEMOPT_GEMM_TUNE=1, which times the top
// candidates of every GEMM it can rerun without changing its result and prints these lines), then
// committed, so that every run takes the same algorithm and so gives the same bits. rank, heur_ms and
// best_ms record what the tuning run saw: the candidate's place in the heuristic's list, the first
// candidate's and this one's median times.
typedef struct mo_lt_choice {
    const char *device;
    long cublaslt_version;
    mo_lt_key key;
    mo_lt_algo_cfg cfg;
    int rank;
    float heur_ms, best_ms;
} mo_lt_choice;
extern const mo_lt_choice mo_lt_table[];
extern const int mo_lt_table_n;
// 1 when two keys are equal, field by field.
int mo_lt_key_eq(const mo_lt_key *x, const mo_lt_key *y);

#ifdef __cplusplus
}
#endif

#endif
