// bench/csv: every column round-trips (quoted text, NaN and -1 as empty cells), appending keeps
// one header, torn last lines are cut, and other schemas or headers are refused.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/csv.h"
#include "kernels/knobs.h"
#include "testlib.h"

static void tmp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/memopt_test_csv_%s_%d.csv", tag, (int)getpid());
    unlink(buf);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_lines_starting(const char *text, const char *prefix) {
    int n = 0;
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, strlen(prefix))) n++;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return n;
}

// A row with every field set to something distinct.
static void full_row(mo_csv_row *r) {
    mo_csv_row_init(r);
    snprintf(r->utc_time, sizeof r->utc_time, "2026-12-02T10:00:00Z");
    snprintf(r->git_rev, sizeof r->git_rev, "abc123-dirty");
    snprintf(r->backend, sizeof r->backend, "cuda");
    snprintf(r->device_name, sizeof r->device_name, "NVIDIA H200, \"SXM\"");
    r->device_mem_bytes = 150754820096LL;
    snprintf(r->driver, sizeof r->driver, "13.0");
    snprintf(r->cuda_runtime, sizeof r->cuda_runtime, "13.0");
    snprintf(r->model, sizeof r->model, "gpt");
    r->layers = 12; r->hidden = 768; r->heads = 12; r->seq = 1024; r->batch = 8; r->micro_batch = 2; r->vocab = 50304;
    r->params = 124475904;
    snprintf(r->precision, sizeof r->precision, "bf16");
    snprintf(r->attn, sizeof r->attn, "fused");
    snprintf(r->ckpt, sizeof r->ckpt, "every:4");
    r->accum = 4; r->tp = 2; r->pp = 3;
    snprintf(r->comm, sizeof r->comm, "local");
    r->cap_bytes = 25769803776LL;
    snprintf(r->alloc, sizeof r->alloc, "caching");
    snprintf(r->status, sizeof r->status, "oom");
    snprintf(r->detail, sizeof r->detail, "tried to allocate 1.50 GiB; cap 24.00 GiB,\nline two \"quoted\"");
    r->steps = 10;
    r->step_ms = 192.9; r->step_ms_p10 = 190.125; r->step_ms_p90 = 1.0 / 3.0;
    r->tokens_per_s = 42467.5; r->model_tflops = 34.2; r->hw_tflops = 41.7e-3; r->mfu = 0.51;
    r->recompute_ms = 42.0; r->recompute_overhead = 0.22;
    r->peak_allocated_bytes = 17354735616LL; r->peak_reserved_bytes = 17448304640LL;
    r->static_bytes = 1991614464LL; r->activation_peak_bytes = 15363121152LL;
    r->param_bytes = 497903616; r->grad_bytes = 497903617; r->optim_bytes = 995807232; r->master_bytes = 0;
    r->activation_bytes = 14000000000LL; r->workspace_bytes = 33554432;
    r->num_ooms = 1; r->num_alloc_retries = 2; r->skipped_steps = 3;
    snprintf(r->dims, sizeof r->dims, "L12 C768 H12 T1024 V50304");
    r->items_per_s = 42467.5;
    r->loss_scale = 65536; r->loss_first = 10.98765432109876; r->loss_last = INFINITY;
    r->predicted_peak_bytes = 17354735616LL;
    r->comm_ms = 1e-300; r->comm_modelled = 1;
    snprintf(r->knobs, sizeof r->knobs, "MEMOPT_CE=loop;MEMOPT_GEMM_TABLE=0");
    r->dp = 4; r->zero = 3;
    snprintf(r->offload, sizeof r->offload, "optimizer");
    r->host_bytes = 1991614464LL;
    r->sp = 1;
}

static int same_double(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void check_same(const mo_csv_row *a, const mo_csv_row *b) {
    // Compare field by field through the formatter: equal text means equal values for every column,
    // and the text of the original must be reproduced exactly.
    char ta[16384], tb[16384];
    CHECK_OK(mo_csv_format_row(a, ta, sizeof ta));
    CHECK_OK(mo_csv_format_row(b, tb, sizeof tb));
    CHECK_MSG(!strcmp(ta, tb), "round trip differs:\n%s%s", ta, tb);
    CHECK(!strcmp(a->detail, b->detail) && !strcmp(a->device_name, b->device_name));
    CHECK(same_double(a->step_ms_p90, b->step_ms_p90) && same_double(a->loss_first, b->loss_first));
    CHECK(same_double(a->loss_last, b->loss_last) && same_double(a->comm_ms, b->comm_ms));
    CHECK(a->cap_bytes == b->cap_bytes && a->activation_bytes == b->activation_bytes);
}

static void test_header(void) {
    const char *h = mo_csv_header();
    static const char start[] = "schema_version,utc_time,git_rev,backend,device_name,device_mem_bytes,driver,cuda_runtime,model,";
    CHECK(!strncmp(h, start, sizeof start - 1));
    // Schema 2 appends dims, items_per_s and the fragmentation columns to schema 1's 57 columns.
    CHECK(strstr(h, ",predicted_peak_bytes,comm_ms,comm_modelled,dims,items_per_s,") != NULL);
    CHECK(strstr(h, ",items_per_s,inactive_split_bytes,largest_free_block_bytes,segments,") != NULL);
    // Schema 3 adds dp and zero before knobs, which stays the last column.
    // Schema 4 adds offload and host_bytes after them, schema 5 offload_copy_ms and offload_stall_ms,
    // schema 6 sp, still before knobs.
    CHECK(strstr(h, ",segments,dp,zero,offload,host_bytes,offload_copy_ms,offload_stall_ms,sp,knobs") != NULL &&
          !strcmp(strrchr(h, ','), ",knobs"));
    CHECK_EQ_U64(mo_csv_num_columns(), 70);
    int commas = 0;
    for (const char *p = h; *p; p++) commas += *p == ',';
    CHECK_EQ_U64(commas + 1, 70);
}

static void test_round_trip(void) {
    char path[128];
    tmp_path(path, sizeof path, "rt");
    mo_csv_row rows[3];
    full_row(&rows[0]);
    mo_csv_row_init(&rows[1]); // every column unknown: empty cells
    full_row(&rows[2]);
    rows[2].step_ms = NAN;     // a NaN measurement is written empty and read back NaN
    rows[2].layers = -1;
    snprintf(rows[2].detail, sizeof rows[2].detail, " leading and trailing spaces ");
    mo_csv_writer *w;
    CHECK_OK(mo_csv_open(path, &w));
    for (int i = 0; i < 3; i++) CHECK_OK(mo_csv_append(w, &rows[i]));
    mo_csv_close(w);

    mo_csv_row *got = NULL;
    size_t n = 0;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 3);
    for (size_t i = 0; i < n && i < 3; i++) check_same(&rows[i], &got[i]);
    if (n == 3) {
        CHECK(got[1].schema_version == MO_CSV_SCHEMA_VERSION && got[1].layers == -1 && isnan(got[1].mfu) && got[1].detail[0] == '\0');
        CHECK(isnan(got[2].step_ms) && got[2].layers == -1 && !strcmp(got[2].detail, " leading and trailing spaces "));
        CHECK(!strcmp(got[0].detail, "tried to allocate 1.50 GiB; cap 24.00 GiB,\nline two \"quoted\""));
        CHECK(got[0].step_ms_p90 == 1.0 / 3.0 && isinf(got[0].loss_last));
    }
    free(got);
    // The text: the quoted fields are RFC 4180, unknown cells empty.
    const char *text = read_file(path);
    CHECK(text && strstr(text, "\"NVIDIA H200, \"\"SXM\"\"\"") != NULL);
    char empty[128];
    snprintf(empty, sizeof empty, "%d", MO_CSV_SCHEMA_VERSION);
    for (size_t i = 1; i < mo_csv_num_columns(); i++) strcat(empty, ",");
    strcat(empty, "\n");
    CHECK(text && strstr(text, empty) != NULL);
    unlink(path);
}

// A schema-1 file (57 columns, gpt rows only) reads: its rows get the gpt dims text and items per
// second from the GPT columns, so they key equal to the same run written now; the writer still
// refuses to append to it.
static void test_schema1_dims(void) {
    char path[128];
    tmp_path(path, sizeof path, "v1");
    const char *h = mo_csv_header();
    const char *cut = strstr(h, ",dims,items_per_s");
    CHECK(cut != NULL);
    if (!cut) return;
    mo_csv_row r;
    full_row(&r);
    r.schema_version = 1;
    r.tokens_per_s = 1234.5;
    r.layers = 12; r.hidden = 768; r.heads = 12; r.seq = 1024; r.vocab = 50304;
    snprintf(r.model, sizeof r.model, "gpt");
    r.dims[0] = '\0';
    r.items_per_s = NAN;
    r.knobs[0] = '\0'; // not in schema 1: reads empty
    char line[16384];
    CHECK_OK(mo_csv_format_row(&r, line, sizeof line));
    // Drop the schema-2 cells (every column from dims on: one comma each before them).
    int drop = 0;
    for (const char *p = cut; *p; p++) drop += *p == ',';
    size_t k = strlen(line);
    while (k > 0 && drop > 0) if (line[--k] == ',') drop--;
    CHECK(drop == 0 && k > 0);
    line[k] = '\n';
    line[k + 1] = '\0';
    char text[20000];
    snprintf(text, sizeof text, "%.*s\n%s", (int)(cut - h), h, line);
    write_file(path, text);
    mo_csv_row *got = NULL;
    size_t n = 0;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 1);
    if (n == 1) {
        CHECK(got[0].schema_version == 1);
        CHECK_MSG(!strcmp(got[0].dims, "L12 C768 H12 T1024 V50304"), "dims '%s'", got[0].dims);
        CHECK(got[0].items_per_s == 1234.5);
        // The key equals the same configuration's as a schema-2 row writes it.
        mo_csv_row now = r;
        now.schema_version = MO_CSV_SCHEMA_VERSION;
        now.dp = 1; now.zero = 0; now.sp = 0; // schema 1 had no data parallelism, nor offload, nor sp
        snprintf(now.offload, sizeof now.offload, "none");
        snprintf(now.dims, sizeof now.dims, "L12 C768 H12 T1024 V50304");
        char k1[1024], k2[1024];
        CHECK(!strcmp(mo_csv_config_key(&got[0], k1, sizeof k1), mo_csv_config_key(&now, k2, sizeof k2)));
    }
    free(got);
    mo_csv_writer *w;
    CHECK(mo_csv_open(path, &w) == MO_ERR_INVALID && strstr(mo_errmsg(), "dims"));
    unlink(path);
}

static void test_append_and_resume(void) {
    char path[128];
    tmp_path(path, sizeof path, "app");
    mo_csv_row r;
    full_row(&r);
    for (int round = 0; round < 3; round++) {
        mo_csv_writer *w;
        CHECK_OK(mo_csv_open(path, &w));
        CHECK_OK(mo_csv_append(w, &r));
        mo_csv_close(w);
    }
    const char *text = read_file(path);
    CHECK_EQ_U64(count_lines_starting(text, "schema_version,"), 1);
    mo_csv_row *got;
    size_t n;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 3);
    free(got);

    // An empty existing file gets the header.
    write_file(path, "");
    mo_csv_writer *w;
    CHECK_OK(mo_csv_open(path, &w));
    mo_csv_close(w);
    CHECK(!strncmp(read_file(path), "schema_version,", 15));

    // A torn last row (interrupted mid-write) is cut before appending.
    char line[16384];
    CHECK_OK(mo_csv_format_row(&r, line, sizeof line));
    char torn[40000];
    snprintf(torn, sizeof torn, "%s\n%s%.*s", mo_csv_header(), line, 50, line);
    write_file(path, torn);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID); // the reader says so ...
    CHECK_OK(mo_csv_open(path, &w));                    // ... the writer mends it
    CHECK_OK(mo_csv_append(w, &r));
    mo_csv_close(w);
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 2);
    free(got);
    unlink(path);
}

// A schema 1 file (the committed results): read without the fragmentation columns, its
// activation_peak_bytes as min(value - the 32 MiB cuBLASLt workspace every schema 1 run held,
// activation_bytes).
static void test_schema1(void) {
    char path[128];
    tmp_path(path, sizeof path, "v1");
    write_file(path, "schema_version,backend,status,peak_allocated_bytes,activation_peak_bytes,workspace_bytes,activation_bytes\n"
                     "1,dry,ok,1000000000,100000000,33554432,90000000\n"
                     "1,dry,oom,2000000000,,,\n"
                     "1,dry,ok,1000000000,100000000,33554432,50000000\n");
    mo_csv_row *got = NULL;
    size_t n = 0;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 3);
    if (n == 3) {
        CHECK(got[0].schema_version == 1 && got[0].peak_allocated_bytes == 1000000000);
        CHECK_EQ_U64((uint64_t)got[0].activation_peak_bytes, 100000000 - 33554432); // less the workspace
        CHECK_EQ_U64((uint64_t)got[2].activation_peak_bytes, 50000000); // at most the activations' own peak
        CHECK(got[0].inactive_split_bytes == -1 && got[0].segments == -1 && got[0].largest_free_block_bytes == -1);
        CHECK(got[1].activation_peak_bytes == -1); // unknown stays unknown
    }
    free(got);
    // The writer does not append schema 2 rows to a schema 1 file.
    mo_csv_writer *w;
    CHECK(mo_csv_open(path, &w) == MO_ERR_INVALID);
    unlink(path);
}

// A CR inside quotes is the cell's own (the writer quotes a cell holding one); only an unquoted CR before the
// LF is a CRLF line end. Found by fuzz_csv: a knobs cell ending in CR lost it on the write-back, so its
// configuration key changed (tests/fuzz/corpus/csv/knobs-ending-in-cr.csv).
static void test_quoted_cr(void) {
    char path[128];
    tmp_path(path, sizeof path, "cr");
    // LF after a quoted CR (what the writer makes), CRLF after one, CRLF after a quoted and a plain cell
    write_file(path, "schema_version,model,detail\n7,gpt,\"ends in CR\r\"\n7,gpt,\"CR\r\"\r\n7,gpt,\"quoted\"\r\n"
                     "7,gpt,plain\r\n");
    mo_csv_row *got = NULL;
    size_t n = 0;
    if (!CHECK_OK(mo_csv_read(path, &got, &n))) return;
    CHECK_EQ_U64(n, 4);
    if (n == 4) {
        CHECK_MSG(!strcmp(got[0].detail, "ends in CR\r"), "quoted CR lost: '%s'", got[0].detail);
        CHECK_MSG(!strcmp(got[1].detail, "CR\r"), "quoted CR before a CRLF: '%s'", got[1].detail);
        CHECK_MSG(!strcmp(got[2].detail, "quoted"), "'%s'", got[2].detail);
        CHECK_MSG(!strcmp(got[3].detail, "plain"), "'%s'", got[3].detail);
    }
    free(got);
}

static void test_refusals(void) {
    char path[128];
    tmp_path(path, sizeof path, "ref");
    mo_csv_row *got;
    size_t n;
    mo_csv_writer *w;

    // Another schema_version.
    char text[8192];
    snprintf(text, sizeof text, "%s\n8,,,,\n", mo_csv_header());
    write_file(path, text);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID);
    char want[256];
    snprintf(want, sizeof want, "%s: schema_version 8, this memopt reads 1 to 7", path);
    CHECK_MSG(strstr(mo_errmsg(), want) != NULL, "%s", mo_errmsg());
    // A version-8 file with columns this schema lacks still gets the version message first.
    snprintf(text, sizeof text, "schema_version,new_column\n8,x\n");
    write_file(path, text);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), "schema_version 8, this memopt reads 1 to 7"));
    // Before schema 7 a gpt row with --attn fused in fp32 / tf32 ran the flash kernels: it reads with
    // MEMOPT_ATTN_FUSED32=own in its knobs, at its sorted place, unless the knob is there; materialized,
    // 16-bit and schema 7 rows keep theirs.
    snprintf(text, sizeof text,
             "schema_version,model,precision,attn,knobs\n"
             "6,gpt,fp32,fused,\n"
             "6,gpt,tf32,fused,MEMOPT_ATTN_DPRE=0;MEMOPT_GEMM_TABLE=0\n"
             "6,gpt,fp32,fused,MEMOPT_ATTN_FUSED32=gemm\n"
             "6,gpt,fp32,materialized,\n"
             "6,gpt,bf16,fused,\n"
             "7,gpt,fp32,fused,\n"
             "2,,tf32,fused,MEMOPT_MARK_LIB_WRITES=1\n");
    write_file(path, text);
    if (CHECK_OK(mo_csv_read(path, &got, &n))) {
        const char *want_knobs[7] = {"MEMOPT_ATTN_FUSED32=own", "MEMOPT_ATTN_DPRE=0;MEMOPT_ATTN_FUSED32=own;MEMOPT_GEMM_TABLE=0",
                                     "MEMOPT_ATTN_FUSED32=gemm", "", "", "",
                                     "MEMOPT_ATTN_FUSED32=own;MEMOPT_MARK_LIB_WRITES=1"};
        if (CHECK_EQ_U64(n, 7))
            for (int i = 0; i < 7; i++)
                CHECK_MSG(!strcmp(got[i].knobs, want_knobs[i]), "row %d knobs '%s', want '%s'", i + 1, got[i].knobs,
                          want_knobs[i]);
        free(got);
    }
    // ... and a knobs cell with no room left for it (319 characters at most) fails the read, naming the
    // file, the line and the column, rather than reading as the new engine
    {
        char longknobs[320];
        memset(longknobs, 'X', 300);
        memcpy(longknobs, "MEMOPT_CE=", 10);
        longknobs[300] = '\0';
        snprintf(text, sizeof text, "schema_version,model,precision,attn,knobs\n6,gpt,fp32,fused,%s\n", longknobs);
        write_file(path, text);
        CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID);
        CHECK_MSG(strstr(mo_errmsg(), ":2: column knobs: no room to add MEMOPT_ATTN_FUSED32=own") != NULL, "%s", mo_errmsg());
    }
    // A schema 4 row (no sp column) reads as sp 0, its key unchanged; a schema 6 row with sp 1 has
    // it in its key, and one with sp 0 the same key as the schema 4 row.
    snprintf(text, sizeof text, "schema_version,model,layers,tp,sp\n4,gpt,12,2,\n6,gpt,12,2,1\n6,gpt,12,2,0\n");
    write_file(path, text);
    if (CHECK_OK(mo_csv_read(path, &got, &n))) {
        char k4[2048], k6[2048], k60[2048];
        if (CHECK_EQ_U64(n, 3)) {
            mo_csv_config_key(&got[0], k4, sizeof k4);
            mo_csv_config_key(&got[1], k6, sizeof k6);
            mo_csv_config_key(&got[2], k60, sizeof k60);
            CHECK_MSG(got[0].sp == 0 && !strstr(k4, "sp="), "schema 4 row: sp %lld key %s", (long long)got[0].sp, k4);
            CHECK_MSG(got[1].sp == 1 && strstr(k6, " sp=1") && strncmp(k4, k6, strlen(k4)) == 0, "sp key: %s", k6);
            CHECK_MSG(!strcmp(k4, k60), "an sp 0 row's key differs from an older row's: %s / %s", k60, k4);
        }
        free(got);
    }
    // A schema 3 row (no offload, host_bytes columns) reads as offload none, host_bytes 0, its key unchanged;
    // a schema 4 row with offload optimizer has it in its key.
    snprintf(text, sizeof text, "schema_version,model,layers,dp,zero\n3,gpt,12,2,1\n4,gpt,12,2,1\n");
    write_file(path, text);
    if (CHECK_OK(mo_csv_read(path, &got, &n))) {
        char key[2048], key2[2048];
        mo_csv_config_key(&got[0], key, sizeof key);
        CHECK_MSG(n == 2 && !strcmp(got[0].offload, "none") && got[0].host_bytes == 0 && !strstr(key, "offload="),
                  "schema 3 row: offload '%s' host_bytes %lld key %s", got[0].offload, (long long)got[0].host_bytes, key);
        CHECK(n == 2 && got[1].host_bytes == -1); // schema 4 without the cell: unknown
        snprintf(got[0].offload, sizeof got[0].offload, "optimizer");
        mo_csv_config_key(&got[0], key2, sizeof key2);
        CHECK_MSG(strstr(key2, " offload=optimizer") && strncmp(key, key2, strlen(key)) == 0, "offload key: %s", key2);
        free(got);
    }
    // A schema 2 row (no dp, zero columns) reads as dp 1, zero 0 and keeps its key.
    snprintf(text, sizeof text, "schema_version,model,layers,tp,pp\n2,gpt,12,1,1\n");
    write_file(path, text);
    if (CHECK_OK(mo_csv_read(path, &got, &n))) {
        char key[2048];
        mo_csv_config_key(&got[0], key, sizeof key);
        CHECK_MSG(n == 1 && got[0].dp == 1 && got[0].zero == 0 && !strstr(key, "dp="), "schema 2 row: dp %lld zero %lld key %s",
                  (long long)got[0].dp, (long long)got[0].zero, key);
        free(got);
    }
    snprintf(text, sizeof text, "schema_version,layers\n0,12\n");
    write_file(path, text);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), "schema_version 0, this memopt reads 1 to 7"));

    // A different header: the writer refuses and leaves the file alone.
    write_file(path, "a,b,c\n1,2,3\n");
    mo_clear_error();
    CHECK(mo_csv_open(path, &w) == MO_ERR_INVALID);
    CHECK_MSG(strstr(mo_errmsg(), "header") && strstr(mo_errmsg(), "'a'") && strstr(mo_errmsg(), "'schema_version'"), "%s",
              mo_errmsg());
    CHECK(!strcmp(read_file(path), "a,b,c\n1,2,3\n"));
    // One column fewer than ours.
    const char *h = mo_csv_header();
    snprintf(text, sizeof text, "%.*s\n", (int)(strrchr(h, ',') - h), h);
    write_file(path, text);
    CHECK(mo_csv_open(path, &w) == MO_ERR_INVALID && strstr(mo_errmsg(), "knobs"));
    // The reader: an unknown column, a row of the wrong width, a bad number.
    snprintf(text, sizeof text, "schema_version,bogus\n1,2\n");
    write_file(path, text);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), "unknown column 'bogus'"));
    write_file(path, "schema_version,layers\n1,2,3\n");
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), ":2: 3 fields, the header has 2"));
    write_file(path, "schema_version,layers\n1,twelve\n");
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), "column layers: 'twelve'"));
    write_file(path, "layers\n12\n");
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_INVALID && strstr(mo_errmsg(), "no schema_version column"));
    unlink(path);
    CHECK(mo_csv_read(path, &got, &n) == MO_ERR_IO);
}

static void test_reorder_and_key(void) {
    char path[128];
    tmp_path(path, sizeof path, "ord");
    // Columns in another order, some missing, CRLF line ends: read by name.
    write_file(path, "layers,precision,schema_version,ckpt\r\n12,bf16,1,\"every:2\"\r\n");
    mo_csv_row *got;
    size_t n;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 1);
    if (n == 1) {
        CHECK(got[0].layers == 12 && !strcmp(got[0].precision, "bf16") && !strcmp(got[0].ckpt, "every:2"));
        CHECK(got[0].hidden == -1 && isnan(got[0].step_ms));
    }
    free(got);
    unlink(path);

    // The key: configuration only, equal for equal configurations, different otherwise.
    mo_config cfg;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    CHECK_OK(mo_config_set(&cfg, "--accum", "2"));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    mo_csv_row a, b;
    mo_csv_row_init(&a);
    mo_csv_row_from_config(&a, &rc, 0);
    CHECK(a.micro_batch == 4 && a.accum == 2 && !strcmp(a.backend, "cuda") && !strcmp(a.ckpt, "none"));
    b = a;
    b.step_ms = 12.5;
    snprintf(b.device_name, sizeof b.device_name, "other");
    char ka[1024], kb[1024];
    CHECK(!strcmp(mo_csv_config_key(&a, ka, sizeof ka), mo_csv_config_key(&b, kb, sizeof kb)));
    CHECK(strstr(ka, "precision=fp32") && strstr(ka, "accum=2") && strstr(ka, "cap_bytes=0"));
    b.cap_bytes = 1 << 30;
    CHECK(strcmp(mo_csv_config_key(&a, ka, sizeof ka), mo_csv_config_key(&b, kb, sizeof kb)) != 0);
}

// The knobs column: the MEMOPT_* settings of the table that are set (non-empty), sorted; another MEMOPT_
// variable is ignored. Rows differing only in knobs are different configurations; a schema 2 file
// written before the column reads with knobs empty.
static void test_knobs(void) {
    size_t nk;
    const mo_knob *k = mo_knobs(&nk);
    CHECK(nk == 32);
    for (size_t i = 0; i < nk; i++) {
        CHECK(!strncmp(k[i].name, "MEMOPT_", 7) && k[i].what && k[i].what[0]);
        if (i) CHECK_MSG(strcmp(k[i - 1].name, k[i].name) < 0, "knobs table not sorted at %s", k[i].name);
    }
    for (size_t i = 0; i < nk; i++) unsetenv(k[i].name);
    char t[320];
    CHECK(!strcmp(mo_knobs_text(t, sizeof t), ""));
    mo_config cfg;
    mo_config_defaults(&cfg, MO_CMD_RUN);
    mo_run_config rc;
    CHECK_OK(mo_config_combination(&cfg, 0, &rc));
    mo_csv_row a, b;
    mo_csv_row_init(&a);
    mo_csv_row_from_config(&a, &rc, 0);
    CHECK(a.knobs[0] == '\0');
    setenv("MEMOPT_GEMM_TABLE", "0", 1);
    setenv("MEMOPT_CE", "loop", 1);
    setenv("MEMOPT_ATTN_DPRE", "", 1);          // set but empty: not a setting
    setenv("MEMOPT_NOT_A_KNOB", "1", 1);        // unknown: nothing reads it, not recorded
    mo_csv_row_init(&b);
    mo_csv_row_from_config(&b, &rc, 0);
    CHECK_MSG(!strcmp(b.knobs, "MEMOPT_CE=loop;MEMOPT_GEMM_TABLE=0"), "knobs '%s'", b.knobs);
    char ka[1024], kb[1024];
    mo_csv_config_key(&a, ka, sizeof ka);
    mo_csv_config_key(&b, kb, sizeof kb);
    CHECK(strcmp(ka, kb) != 0 && strstr(kb, " knobs=MEMOPT_CE=loop;MEMOPT_GEMM_TABLE=0"));
    unsetenv("MEMOPT_GEMM_TABLE"); unsetenv("MEMOPT_CE"); unsetenv("MEMOPT_ATTN_DPRE"); unsetenv("MEMOPT_NOT_A_KNOB");
    // A short buffer: whole settings only.
    setenv("MEMOPT_CE", "loop", 1);
    setenv("MEMOPT_GEMM_TABLE", "0", 1);
    char shortbuf[20];
    CHECK(!strcmp(mo_knobs_text(shortbuf, sizeof shortbuf), "MEMOPT_CE=loop"));
    unsetenv("MEMOPT_GEMM_TABLE"); unsetenv("MEMOPT_CE");

    // mo_knobs_insert: at the sorted place (first, middle, last), not twice, not past the buffer
    char ins[96] = "";
    CHECK(mo_knobs_insert(ins, sizeof ins, "MEMOPT_CE", "loop") == 0);
    CHECK_MSG(!strcmp(ins, "MEMOPT_CE=loop"), "'%s'", ins);
    CHECK(mo_knobs_insert(ins, sizeof ins, "MEMOPT_ATTN_FUSED32", "own") == 0);
    CHECK(mo_knobs_insert(ins, sizeof ins, "MEMOPT_GEMM_TABLE", "0") == 0);
    CHECK(mo_knobs_insert(ins, sizeof ins, "MEMOPT_BN", "cudnn") == 0);
    CHECK(mo_knobs_insert(ins, sizeof ins, "MEMOPT_CE", "other") == 0); // already there: unchanged
    CHECK_MSG(!strcmp(ins, "MEMOPT_ATTN_FUSED32=own;MEMOPT_BN=cudnn;MEMOPT_CE=loop;MEMOPT_GEMM_TABLE=0"), "'%s'", ins);
    char tiny[24] = "MEMOPT_CE=loop";
    CHECK(mo_knobs_insert(tiny, sizeof tiny, "MEMOPT_GEMM_TABLE", "0") == -1); // would not fit: unchanged
    CHECK_MSG(!strcmp(tiny, "MEMOPT_CE=loop"), "'%s'", tiny);
    char exact[24] = "MEMOPT_CE=loop"; // "MEMOPT_A=1;MEMOPT_CE=loop" is 25 characters: 26 bytes
    CHECK(mo_knobs_insert(exact, sizeof exact, "MEMOPT_A", "1") == -1);
    CHECK_MSG(!strcmp(exact, "MEMOPT_CE=loop"), "'%s'", exact);
    // a text longer than any fixed buffer (an earlier form overflowed a 512-byte one): sorted, intact
    char big[1400], want[1500];
    size_t bl = 0;
    for (int i = 0; i < 60; i++) bl += (size_t)snprintf(big + bl, sizeof big - bl, "%sMEMOPT_Z%02d=value", i ? ";" : "", i);
    snprintf(want, sizeof want, "MEMOPT_ATTN_FUSED32=own;%s", big);
    CHECK(mo_knobs_insert(big, sizeof big, "MEMOPT_ATTN_FUSED32", "own") == 0);
    CHECK_MSG(!strcmp(big, want), "a %zu-byte text: '%.60s...'", strlen(want), big);
    // mo_knobs_apply: a row's knobs replace the environment's (the others unset), then back
    setenv("MEMOPT_CE", "loop", 1);
    setenv("MEMOPT_BN", "cudnn", 1);
    char saved[320], back[320];
    CHECK(mo_knobs_apply("MEMOPT_ATTN_FUSED32=own;MEMOPT_GEMM_TABLE=0", saved, sizeof saved) == 0);
    CHECK_MSG(!strcmp(mo_knobs_text(t, sizeof t), "MEMOPT_ATTN_FUSED32=own;MEMOPT_GEMM_TABLE=0"), "applied '%s'", t);
    CHECK_MSG(!strcmp(saved, "MEMOPT_BN=cudnn;MEMOPT_CE=loop"), "saved '%s'", saved);
    CHECK(mo_knobs_apply(saved, back, sizeof back) == 0);
    CHECK_MSG(!strcmp(mo_knobs_text(t, sizeof t), "MEMOPT_BN=cudnn;MEMOPT_CE=loop"), "restored '%s'", t);
    setenv("MEMOPT_FAIL_ALLOC", "7", 1); // fault injection: neither set nor unset by a row
    CHECK(mo_knobs_apply("MEMOPT_FAIL_ALLOC=3", back, sizeof back) == 0);
    CHECK_MSG(getenv("MEMOPT_FAIL_ALLOC") && !strcmp(getenv("MEMOPT_FAIL_ALLOC"), "7"), "MEMOPT_FAIL_ALLOC replaced");
    CHECK(mo_knobs_apply("", saved, sizeof saved) == 0);
    CHECK_MSG(getenv("MEMOPT_FAIL_ALLOC") && !strcmp(getenv("MEMOPT_FAIL_ALLOC"), "7"), "MEMOPT_FAIL_ALLOC unset");
    unsetenv("MEMOPT_FAIL_ALLOC");
    CHECK(mo_knobs_apply(back, saved, sizeof saved) == 0); // back to MEMOPT_BN=cudnn;MEMOPT_CE=loop
    CHECK(mo_knobs_apply("", back, 4) == -1); // the saved copy would not fit: nothing changes
    CHECK_MSG(!strcmp(mo_knobs_text(t, sizeof t), "MEMOPT_BN=cudnn;MEMOPT_CE=loop"), "after a refused apply '%s'", t);
    unsetenv("MEMOPT_BN"); unsetenv("MEMOPT_CE");

    // An --offload optimizer row records its host thread count: the default's, or the variable's, also
    // when long settings fill the buffer (whole entries give way; never a cut entry, never the default
    // in place of the value that ran).
    mo_run_config ro = rc;
    ro.offload = MO_OFFLOAD_OPTIMIZER;
    mo_csv_row c;
    mo_csv_row_init(&c);
    mo_csv_row_from_config(&c, &ro, 0);
    CHECK_MSG(!strcmp(c.knobs, "MEMOPT_OFFLOAD_THREADS=8"), "default: knobs '%s'", c.knobs);
    setenv("MEMOPT_OFFLOAD_THREADS", "3", 1);
    mo_csv_row_init(&c);
    mo_csv_row_from_config(&c, &ro, 0);
    CHECK_MSG(!strcmp(c.knobs, "MEMOPT_OFFLOAD_THREADS=3"), "set: knobs '%s'", c.knobs);
    char longv[200];
    memset(longv, 'x', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    setenv("MEMOPT_ATTN_CHUNK_ROWS", longv, 1); // 223 characters with its name
    setenv("MEMOPT_CONV_TABLE", longv, 1);      // the two no longer fit with the threads
    mo_csv_row_init(&c);
    mo_csv_row_from_config(&c, &ro, 0);
    const char *tail = strrchr(c.knobs, ';');
    CHECK_MSG(strlen(c.knobs) < sizeof c.knobs && tail && !strcmp(tail, ";MEMOPT_OFFLOAD_THREADS=3") &&
              !strncmp(c.knobs, "MEMOPT_ATTN_CHUNK_ROWS=", 23),
              "full buffer: knobs '%.60s...%s'", c.knobs, tail ? tail : "(no ;)");
    // an entry of 300 characters leaves no room for the threads': it gives way
    char v277[278];
    memset(v277, 'y', sizeof v277 - 1);
    v277[sizeof v277 - 1] = '\0';
    setenv("MEMOPT_ATTN_CHUNK_ROWS", v277, 1);
    mo_csv_row_init(&c);
    mo_csv_row_from_config(&c, &ro, 0);
    CHECK_MSG(!strcmp(c.knobs, "MEMOPT_OFFLOAD_THREADS=3"), "no room: knobs '%.40s...'", c.knobs);
    unsetenv("MEMOPT_ATTN_CHUNK_ROWS"); unsetenv("MEMOPT_CONV_TABLE"); unsetenv("MEMOPT_OFFLOAD_THREADS");

    // A schema 2 file without the knobs column (written before it): read, knobs empty, the same key.
    char path[128];
    tmp_path(path, sizeof path, "noknobs");
    const char *h = mo_csv_header();
    char text[20000], row[16384];
    CHECK_OK(mo_csv_format_row(&a, row, sizeof row));
    *strrchr(row, ',') = '\0'; // the empty knobs cell
    snprintf(text, sizeof text, "%.*s\n%s\n", (int)(strrchr(h, ',') - h), h, row);
    write_file(path, text);
    mo_csv_row *got = NULL;
    size_t n = 0;
    CHECK_OK(mo_csv_read(path, &got, &n));
    CHECK_EQ_U64(n, 1);
    if (n == 1) {
        char kg[1024];
        CHECK(got[0].knobs[0] == '\0' && !strcmp(mo_csv_config_key(&got[0], kg, sizeof kg), ka));
    }
    free(got);
    unlink(path);
}

int main(void) {
    test_header();
    test_knobs();
    test_round_trip();
    test_schema1_dims();
    test_append_and_resume();
    test_schema1();
    test_refusals();
    test_quoted_cr();
    test_reorder_and_key();
    return test_finish();
}
