// The results CSV: one table of columns drives the header, the writer and the reader, so the
// three cannot drift apart.
#include "csv.h"
#include "kernels/knobs.h"
#include "models/model.h"
#include "strategies/offload_update.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { COL_I64, COL_F64, COL_STR } col_type;
typedef struct col_def {
    const char *name;
    col_type type;
    size_t off;
    size_t size; // text columns: the buffer size
} col_def;

#define I(f) {#f, COL_I64, offsetof(mo_csv_row, f), 0}
#define F(f) {#f, COL_F64, offsetof(mo_csv_row, f), 0}
#define S(f) {#f, COL_STR, offsetof(mo_csv_row, f), sizeof(((mo_csv_row *)0)->f)}
static const col_def cols[] = {
    I(schema_version), S(utc_time), S(git_rev), S(backend), S(device_name), I(device_mem_bytes), S(driver),
    S(cuda_runtime), S(model), I(layers), I(hidden), I(heads), I(seq), I(batch), I(micro_batch), I(vocab),
    I(params), S(precision), S(attn), S(ckpt), I(accum), I(tp), I(pp), S(comm), I(cap_bytes), S(alloc),
    S(status), S(detail), I(steps), F(step_ms), F(step_ms_p10), F(step_ms_p90), F(tokens_per_s),
    F(model_tflops), F(hw_tflops), F(mfu), F(recompute_ms), F(recompute_overhead), I(peak_allocated_bytes),
    I(peak_reserved_bytes), I(static_bytes), I(activation_peak_bytes), I(param_bytes), I(grad_bytes),
    I(optim_bytes), I(master_bytes), I(activation_bytes), I(workspace_bytes), I(num_ooms),
    I(num_alloc_retries), I(skipped_steps), F(loss_scale), F(loss_first), F(loss_last),
    I(predicted_peak_bytes), F(comm_ms), I(comm_modelled),
    // schema 2, kept together at the end
    S(dims), F(items_per_s), I(inactive_split_bytes), I(largest_free_block_bytes), I(segments),
    // schema 3 (before knobs, which stays the last column)
    I(dp), I(zero),
    // schema 4 (before knobs)
    S(offload), I(host_bytes),
    // schema 5 (before knobs)
    F(offload_copy_ms), F(offload_stall_ms),
    // schema 6 (before knobs)
    I(sp),
    S(knobs),
};
#undef I
#undef F
#undef S
#define NCOLS (sizeof cols / sizeof cols[0])
// The cuBLASLt workspace every schema 1 run held from start to end (kernels/ctx.h, 32 MiB then).
#define SCHEMA1_WORKSPACE ((int64_t)32 << 20)

size_t mo_csv_num_columns(void) { return NCOLS; }

const char *mo_csv_header(void) {
    static char header[2048];
    if (!header[0])
        for (size_t i = 0; i < NCOLS; i++) {
            if (i) strcat(header, ",");
            strcat(header, cols[i].name);
        }
    return header;
}

static int64_t *i64_at(mo_csv_row *r, const col_def *c) { return (int64_t *)((char *)r + c->off); }
static double *f64_at(mo_csv_row *r, const col_def *c) { return (double *)((char *)r + c->off); }
static char *str_at(mo_csv_row *r, const col_def *c) { return (char *)r + c->off; }

void mo_csv_row_init(mo_csv_row *row) {
    memset(row, 0, sizeof *row);
    for (size_t i = 0; i < NCOLS; i++) {
        if (cols[i].type == COL_I64) *i64_at(row, &cols[i]) = -1;
        if (cols[i].type == COL_F64) *f64_at(row, &cols[i]) = NAN;
    }
    row->comm_bytes_rank = -1;
    row->schema_version = MO_CSV_SCHEMA_VERSION;
}

void mo_csv_row_from_config(mo_csv_row *row, const mo_run_config *rc, uint64_t cap_bytes) {
    snprintf(row->backend, sizeof row->backend, "%s", mo_backend_name(rc->backend));
    snprintf(row->model, sizeof row->model, "%s", rc->model);
    const mo_model_ops *m = mo_model_find(rc->model);
    if (m && m->dims_text) m->dims_text(rc, row->dims, sizeof row->dims);
    // GPT's dimension columns: empty for a model that lacks the dimension (its dims text says all).
    unsigned has = m ? m->dims : ~0u;
    row->layers = has & MO_DIM_LAYERS ? rc->layers : -1;
    row->hidden = has & MO_DIM_HIDDEN ? rc->hidden : -1;
    row->heads = has & MO_DIM_HEADS ? rc->heads : -1;
    row->seq = has & MO_DIM_SEQ ? rc->seq : -1;
    row->batch = rc->batch;
    row->micro_batch = rc->accum > 0 ? rc->batch / rc->accum : -1;
    row->vocab = has & MO_DIM_VOCAB ? rc->vocab : -1;
    snprintf(row->precision, sizeof row->precision, "%s", mo_precision_name(rc->precision));
    snprintf(row->attn, sizeof row->attn, "%s", has & MO_OPT_ATTN ? mo_attn_name(rc->attn) : "");
    mo_ckpt_format(rc->ckpt, row->ckpt, sizeof row->ckpt);
    row->accum = rc->accum;
    row->tp = rc->tp;
    row->pp = rc->pp;
    row->dp = rc->dp > 1 ? rc->dp : 1;
    row->zero = rc->zero;
    row->sp = rc->sp ? 1 : 0;
    snprintf(row->offload, sizeof row->offload, "%s", mo_offload_name(rc->offload));
    snprintf(row->comm, sizeof row->comm, "%s", mo_comm_name(rc->comm));
    row->cap_bytes = (int64_t)cap_bytes;
    snprintf(row->alloc, sizeof row->alloc, "%s", mo_alloc_kind_name(rc->alloc));
    row->steps = rc->steps;
    mo_knobs_text(row->knobs, sizeof row->knobs); // the process's settings: what this run's context reads
    // An offloaded update's host thread count is in the row even when it is the default (it was 1 before
    // session 12, 8 since: the planner times a row by its count, and an older row without it by 1).
    // MEMOPT_OFFLOAD_THREADS is the table's last knob, so appending keeps the text sorted.
    // The value is the one the run takes (mo_offload_knobs: the variable's, else the default), also when
    // a full buffer left the variable's own entry out; whole entries before it give way to make room.
    if (rc->offload == MO_OFFLOAD_OPTIMIZER && !strstr(row->knobs, "MEMOPT_OFFLOAD_THREADS=")) {
        size_t chunk = 0;
        int t = MO_OFFLOAD_THREADS_DEFAULT;
        if (mo_offload_knobs(&chunk, &t) != MO_OK) mo_clear_error(); // the run itself refuses a bad value
        char e[48];
        snprintf(e, sizeof e, "MEMOPT_OFFLOAD_THREADS=%d", t);
        size_t len = strlen(row->knobs);
        while (len && len + 1 + strlen(e) >= sizeof row->knobs) { // drop the last whole entry
            char *semi = strrchr(row->knobs, ';');
            len = semi ? (size_t)(semi - row->knobs) : 0;
            row->knobs[len] = '\0';
        }
        snprintf(row->knobs + len, sizeof row->knobs - len, "%s%s", len ? ";" : "", e);
    }
}

// ---------------------------------------------------------------- formatting

typedef struct sbuf {
    char *p;
    size_t n, len;
    int overflow;
} sbuf;

static void put(sbuf *b, const char *s, size_t k) {
    if (b->len + k + 1 > b->n) { b->overflow = 1; return; }
    memcpy(b->p + b->len, s, k);
    b->len += k;
    b->p[b->len] = '\0';
}

// RFC 4180: quote a field holding a comma, quote, CR or LF (or edge spaces, which readers may trim).
static void put_text(sbuf *b, const char *s) {
    size_t k = strlen(s);
    int quote = strpbrk(s, ",\"\r\n") != NULL || (k && (s[0] == ' ' || s[k - 1] == ' '));
    if (!quote) { put(b, s, k); return; }
    put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"') put(b, "\"", 1); // a quote is written twice
        put(b, p, 1);
    }
    put(b, "\"", 1);
}

// The shortest %g form that reads back to the same double.
static void put_real(sbuf *b, double v) {
    if (isnan(v)) return;
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    put(b, t, strlen(t));
}

mo_status mo_csv_format_row(const mo_csv_row *row, char *buf, size_t n) {
    sbuf b = {buf, n, 0, 0};
    if (n) buf[0] = '\0';
    for (size_t i = 0; i < NCOLS; i++) {
        if (i) put(&b, ",", 1);
        const col_def *c = &cols[i];
        mo_csv_row *r = (mo_csv_row *)row; // read only
        if (c->type == COL_I64) {
            int64_t v = *i64_at(r, c);
            if (v != -1) {
                char t[32];
                snprintf(t, sizeof t, "%lld", (long long)v);
                put(&b, t, strlen(t));
            }
        } else if (c->type == COL_F64) {
            put_real(&b, *f64_at(r, c));
        } else {
            const char *s = str_at(r, c);
            put_text(&b, memchr(s, '\0', c->size) ? s : "");
        }
    }
    put(&b, "\n", 1);
    if (b.overflow) return MO_FAIL(MO_ERR_INVALID, "CSV row longer than %zu bytes", n);
    return MO_OK;
}

const char *mo_csv_config_key(const mo_csv_row *r, char *buf, size_t n) {
    char cap[24] = "", accum[24] = "", tp[24] = "", pp[24] = "";
    if (r->cap_bytes >= 0) snprintf(cap, sizeof cap, "%lld", (long long)r->cap_bytes);
    if (r->accum >= 0) snprintf(accum, sizeof accum, "%lld", (long long)r->accum);
    if (r->tp >= 0) snprintf(tp, sizeof tp, "%lld", (long long)r->tp);
    if (r->pp >= 0) snprintf(pp, sizeof pp, "%lld", (long long)r->pp);
    snprintf(buf, n,
             "backend=%s model=%s layers=%lld hidden=%lld heads=%lld seq=%lld batch=%lld vocab=%lld precision=%s "
             "attn=%s ckpt=%s accum=%s tp=%s pp=%s comm=%s cap_bytes=%s alloc=%s dims=%s knobs=%s",
             r->backend, r->model, (long long)r->layers, (long long)r->hidden, (long long)r->heads,
             (long long)r->seq, (long long)r->batch, (long long)r->vocab, r->precision, r->attn, r->ckpt, accum, tp,
             pp, r->comm, cap, r->alloc, r->dims, r->knobs);
    // Data parallelism only when used, so the keys of every row without it stay as they were.
    size_t k = strlen(buf);
    if ((r->dp > 1 || r->zero > 0) && k < n)
        snprintf(buf + k, n - k, " dp=%lld zero=%lld", (long long)r->dp, (long long)r->zero);
    k = strlen(buf); // offload likewise
    if (r->offload[0] && strcmp(r->offload, "none") && k < n) snprintf(buf + k, n - k, " offload=%s", r->offload);
    k = strlen(buf); // sequence parallelism likewise
    if (r->sp > 0 && k < n) snprintf(buf + k, n - k, " sp=%lld", (long long)r->sp);
    return buf;
}

// ---------------------------------------------------------------- records

// Reads a whole file into a NUL-terminated buffer.
static mo_status slurp(const char *path, int fd, char **out, size_t *len) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return MO_FAIL(MO_ERR_IO, "%s: %s", path, strerror(errno));
    char *p = malloc((size_t)sb.st_size + 1);
    if (!p) return MO_FAIL(MO_ERR_IO, "%s: out of host memory reading %lld bytes", path, (long long)sb.st_size);
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t k = pread(fd, p + got, (size_t)sb.st_size - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(p);
            return MO_FAIL(MO_ERR_IO, "%s: read failed: %s", path, k < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)k;
    }
    p[got] = '\0';
    *out = p;
    *len = got;
    return MO_OK;
}

int mo_csv_keyed_cmp(const void *a, const void *b) {
    const mo_csv_keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return (x->index > y->index) - (x->index < y->index);
}

// Encodings memopt does not write, named plainly (else they surface as a strange first column).
static mo_status check_text(const char *path, const char *text, size_t len) {
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3))
        return MO_FAIL(MO_ERR_INVALID, "%s: starts with a UTF-8 byte-order mark (accepted: memopt's CSV, which has none; save it without the BOM)", path);
    size_t hl = strcspn(text, "\n");
    const char *cr = memchr(text, '\r', hl);
    if (cr && cr + 1 < text + hl)
        return MO_FAIL(MO_ERR_INVALID, "%s: its lines end in CR alone (accepted: LF or CRLF line endings)", path);
    return MO_OK;
}

// A parser over the buffer: next_record splits one record into fields in place.
typedef struct reader {
    char *p, *end;
    int line; // line where the current record starts
    int next_line;
} reader;

// Returns the number of fields (0 at end of input), -1 on an unterminated quote.
// Fields point into the buffer, unquoted and NUL-terminated. *complete: the record ended in a newline.
static int next_record(reader *rd, char **fields, int max, int *complete) {
    if (rd->p >= rd->end) return 0;
    rd->line = rd->next_line;
    int nf = 0;
    *complete = 0;
    char *w = rd->p; // write cursor: unquoting shrinks fields in place
    char *field = w;
    char *lit = w; // the field's bytes before lit came from inside quotes: a CR there is data, not a CRLF's
    int in_quotes = 0;
    while (rd->p < rd->end) {
        char ch = *rd->p++;
        if (in_quotes) {
            if (ch == '"') {
                if (rd->p < rd->end && *rd->p == '"') { *w++ = '"'; rd->p++; }
                else { in_quotes = 0; lit = w; }
            } else {
                if (ch == '\n') rd->next_line++;
                *w++ = ch;
            }
            continue;
        }
        if (ch == '"') { in_quotes = 1; continue; }
        if (ch == ',' || ch == '\n') {
            char *fend = w;
            if (ch == '\n' && fend > lit && fend[-1] == '\r') fend--; // CRLF: an unquoted CR before the LF
            *fend = '\0';
            if (nf < max) fields[nf] = field;
            nf++;
            w = rd->p; // the next field starts after the separator
            field = lit = w;
            if (ch == '\n') {
                rd->next_line++;
                *complete = 1;
                return nf;
            }
            continue;
        }
        *w++ = ch;
    }
    if (in_quotes) return -1;
    *w = '\0';
    if (nf < max) fields[nf] = field;
    return nf + 1;
}

// Offset just past the last complete record (a newline outside quotes).
static size_t complete_prefix(const char *p, size_t len) {
    size_t last = 0;
    int in_quotes = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '"') in_quotes = !in_quotes; // "" toggles twice: no change
        else if (p[i] == '\n' && !in_quotes) last = i + 1;
    }
    return last;
}

// ---------------------------------------------------------------- writer

struct mo_csv_writer {
    int fd;
    char path[MO_PATH_MAX];
    size_t repaired; // bytes of a torn last line (or header) cut off when the file was opened
};

// Writers of one file take turns (flock): two processes creating it cannot both write the header,
// and a row is whole when the next writer sees the end of the file.
static mo_status lock_file(int fd, const char *path) {
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) return MO_FAIL(MO_ERR_IO, "%s: cannot lock: %s", path, strerror(errno));
    return MO_OK;
}

static void unlock_file(int fd) { flock(fd, LOCK_UN); }

static mo_status write_all(int fd, const char *path, const char *s, size_t n) {
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return MO_FAIL(MO_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        s += k;
        n -= (size_t)k;
    }
    if (fsync(fd) != 0) return MO_FAIL(MO_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    return MO_OK;
}

// The first column where an existing header departs from ours, for the refusal message.
static mo_status header_mismatch(const char *path, const char *have) {
    const char *want = mo_csv_header();
    size_t col = 0;
    const char *a = have, *b = want;
    for (;;) {
        size_t la = strcspn(a, ",\r\n"), lb = strcspn(b, ",");
        if (la != lb || strncmp(a, b, la)) {
            char got[64], exp[64];
            snprintf(got, sizeof got, "%.*s", (int)(la < 60 ? la : 60), a);
            snprintf(exp, sizeof exp, "%.*s", (int)(lb < 60 ? lb : 60), b);
            return MO_FAIL(MO_ERR_INVALID,
                           "%s: its header is not memopt's CSV schema %d (column %zu is '%s', expected '%s'); "
                           "write to another file",
                           path, MO_CSV_SCHEMA_VERSION, col + 1, la ? got : "(none)", lb ? exp : "(none)");
        }
        if (!b[lb]) return MO_FAIL(MO_ERR_INVALID, "%s: its header has more columns than memopt's CSV schema %d", path, MO_CSV_SCHEMA_VERSION);
        a += la + (a[la] == ',');
        b += lb + 1;
        col++;
    }
}

mo_status mo_mkdir_p(const char *dir, const char *flag) {
    char p[MO_PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return MO_FAIL(MO_ERR_INVALID, "%s: path too long", flag);
    if (!p[0]) return MO_OK;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            struct stat sb;
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return MO_FAIL(MO_ERR_IO, "%s: cannot create folder '%s': %s", flag, p, strerror(errno));
            if (stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode))
                return MO_FAIL(MO_ERR_IO, "%s: '%s' exists and is not a folder", flag, p);
            *s = c;
            if (!c) break;
        }
    }
    return MO_OK;
}

mo_status mo_mkdir_parent(const char *path, const char *flag) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return MO_OK;
    char dir[MO_PATH_MAX];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir) return MO_FAIL(MO_ERR_INVALID, "%s: path too long", flag);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return mo_mkdir_p(dir, flag);
}

mo_status mo_csv_open(const char *path, mo_csv_writer **out) {
    *out = NULL;
    if (strlen(path) >= MO_PATH_MAX) return MO_FAIL(MO_ERR_INVALID, "--csv: path too long");
    MO_TRY(mo_mkdir_parent(path, "--csv"));
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return MO_FAIL(MO_ERR_IO, "%s: cannot open for append: %s", path, strerror(errno));
    mo_status st = lock_file(fd, path);
    if (st != MO_OK) { close(fd); return st; }
    char *text = NULL;
    size_t len = 0, cut = 0;
    st = slurp(path, fd, &text, &len);
    if (st == MO_OK && (st = check_text(path, text, len)) != MO_OK) free(text);
    if (st != MO_OK) { unlock_file(fd); close(fd); return st; }
    const char *header = mo_csv_header();
    size_t keep = complete_prefix(text, len);
    if (keep == 0) {
        // New, empty, or only a torn header: start over with the header.
        cut = len;
        if (len && strncmp(text, header, len)) st = header_mismatch(path, text);
        else if (len && ftruncate(fd, 0) != 0) st = MO_FAIL(MO_ERR_IO, "%s: ftruncate: %s", path, strerror(errno));
        else {
            char line[2048];
            snprintf(line, sizeof line, "%s\n", header);
            st = write_all(fd, path, line, strlen(line));
        }
    } else {
        size_t hl = strcspn(text, "\n");
        if (hl && text[hl - 1] == '\r') hl--;
        if (hl != strlen(header) || strncmp(text, header, hl)) st = header_mismatch(path, text);
        else if (keep < len && ftruncate(fd, (off_t)keep) != 0) // a row torn by an interruption
            st = MO_FAIL(MO_ERR_IO, "%s: ftruncate: %s", path, strerror(errno));
        else cut = len - keep;
    }
    free(text);
    unlock_file(fd);
    if (st != MO_OK) { close(fd); return st; }
    mo_csv_writer *w = calloc(1, sizeof *w);
    if (!w) { close(fd); return MO_FAIL(MO_ERR_IO, "out of host memory"); }
    w->fd = fd;
    w->repaired = cut;
    snprintf(w->path, sizeof w->path, "%s", path);
    *out = w;
    return MO_OK;
}

size_t mo_csv_repaired_bytes(const mo_csv_writer *w) { return w ? w->repaired : 0; }

mo_status mo_csv_append(mo_csv_writer *w, const mo_csv_row *row) {
    char buf[16384];
    MO_TRY(mo_csv_format_row(row, buf, sizeof buf));
    MO_TRY(lock_file(w->fd, w->path));
    // O_APPEND: the row lands at the end. A write cut short (a full disk, the file size limit)
    // is taken back, so the file never ends in part of a row.
    off_t end = lseek(w->fd, 0, SEEK_END);
    mo_status st = write_all(w->fd, w->path, buf, strlen(buf));
    struct stat sb;
    if (st != MO_OK && end >= 0 && fstat(w->fd, &sb) == 0 && sb.st_size > end && ftruncate(w->fd, end) != 0) {
        int e = errno;
        char why[1024];
        snprintf(why, sizeof why, "%s", mo_errmsg_plain());
        st = MO_FAIL(MO_ERR_IO, "%s (and cutting the partial row failed: %s)", why, strerror(e));
    }
    unlock_file(w->fd);
    return st;
}

void mo_csv_close(mo_csv_writer *w) {
    if (!w) return;
    close(w->fd);
    free(w);
}

// ---------------------------------------------------------------- reader

static mo_status parse_cell(const char *path, int line, const col_def *c, const char *s, mo_csv_row *r) {
    char *end = NULL;
    switch (c->type) {
    case COL_I64:
        if (!*s) { *i64_at(r, c) = -1; return MO_OK; }
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (*end || errno) return MO_FAIL(MO_ERR_INVALID, "%s:%d: column %s: '%s' is not an integer", path, line, c->name, s);
        // memopt writes an unknown count as an empty cell, never a negative one.
        if (v < 0)
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: column %s: '%s' is negative (accepted: a count >= 0, or empty)", path,
                           line, c->name, s);
        *i64_at(r, c) = v;
        return MO_OK;
    case COL_F64:
        if (!*s) { *f64_at(r, c) = NAN; return MO_OK; }
        double d = strtod(s, &end);
        if (*end) return MO_FAIL(MO_ERR_INVALID, "%s:%d: column %s: '%s' is not a number", path, line, c->name, s);
        // memopt writes an unknown value as an empty cell: a 'nan' is not memopt's (inf is: a diverged loss).
        if (isnan(d))
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: column %s: '%s' is not a number (accepted: a number, or empty)", path,
                           line, c->name, s);
        *f64_at(r, c) = d;
        return MO_OK;
    case COL_STR:
        if (strlen(s) >= c->size)
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: column %s: value longer than %zu characters", path, line, c->name, c->size - 1);
        memcpy(str_at(r, c), s, strlen(s) + 1);
        return MO_OK;
    }
    return MO_OK;
}

#define MAX_FIELDS 256

// A row of an older schema, brought up to this one (its schema_version stays the file's). Version 1 had gpt rows only: their dims text is
// the gpt table's of the GPT columns, and their items per second the tokens per second.
// A gpt row without dims, of either version (schema 2 files written before dims was added, like the
// committed results/baseline-dry.csv, have none), gets them the same way, so that its key matches.
// Fails (path:line) only when the knobs cell has no room for what schema 7 adds to it.
static mo_status upgrade_row(mo_csv_row *r, const char *path, int line) {
    if (r->schema_version < 3 && r->dp < 0) r->dp = 1; // before schema 3: no data parallelism
    if (r->schema_version < 3 && r->zero < 0) r->zero = 0;
    if (r->schema_version < 4 && !r->offload[0]) snprintf(r->offload, sizeof r->offload, "none"); // before schema 4: none
    if (r->schema_version < 4 && r->host_bytes < 0) r->host_bytes = 0;
    if (r->schema_version < 6 && r->sp < 0) r->sp = 0; // before schema 6: no sequence parallelism
    // before schema 7 the fused attention on fp32 data was the flash kernels' (csv.h)
    if (r->schema_version < 7 && (!r->model[0] || !strcmp(r->model, "gpt")) && !strcmp(r->attn, "fused") &&
        (!strcmp(r->precision, "fp32") || !strcmp(r->precision, "tf32")) && !strstr(r->knobs, "MEMOPT_ATTN_FUSED32=") &&
        mo_knobs_insert(r->knobs, sizeof r->knobs, "MEMOPT_ATTN_FUSED32", "own") != 0)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: column knobs: no room to add MEMOPT_ATTN_FUSED32=own to a schema %lld "
                       "fused %s row (%zu characters at most)", path, line, (long long)r->schema_version, r->precision,
                       sizeof r->knobs - 1);
    if (!r->model[0] || !strcmp(r->model, "gpt")) {
        const mo_model_ops *m = mo_model_find("gpt");
        if (m && !r->dims[0] && r->layers > 0 && r->hidden > 0 && r->heads > 0 && r->seq > 0 && r->vocab > 0) {
            mo_run_config rc;
            memset(&rc, 0, sizeof rc);
            rc.layers = (int)r->layers; rc.hidden = (int)r->hidden; rc.heads = (int)r->heads;
            rc.seq = (int)r->seq; rc.vocab = (int)r->vocab;
            m->dims_text(&rc, r->dims, sizeof r->dims);
        }
        if (isnan(r->items_per_s)) r->items_per_s = r->tokens_per_s;
    }
    if (r->schema_version >= 2) return MO_OK;
    if (r->activation_peak_bytes >= SCHEMA1_WORKSPACE) {
        // Schema 2's definition (csv.h): the activations at the peak are at most the peak less static
        // less the workspace always held, and at most the activation category's own peak.
        r->activation_peak_bytes -= SCHEMA1_WORKSPACE;
        if (r->activation_bytes >= 0 && r->activation_bytes < r->activation_peak_bytes)
            r->activation_peak_bytes = r->activation_bytes;
    }
    return MO_OK;
}

mo_status mo_csv_read(const char *path, mo_csv_row **rows_out, size_t *n_out) {
    *rows_out = NULL;
    *n_out = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return MO_FAIL(MO_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    mo_status st = slurp(path, fd, &text, &len);
    close(fd);
    if (st == MO_OK && (st = check_text(path, text, len)) != MO_OK) free(text);
    if (st != MO_OK) return st;

    reader rd = {text, text + len, 1, 1};
    char *fields[MAX_FIELDS];
    int complete;
    int nh = next_record(&rd, fields, MAX_FIELDS, &complete);
    mo_csv_row *rows = NULL;
    size_t n = 0, cap = 0;
    int map[MAX_FIELDS];     // header position -> column, -1 unknown
    const char *unknown = NULL;
    int version_at = -1;
    if (nh <= 0) { st = MO_FAIL(MO_ERR_INVALID, "%s: empty file, no CSV header", path); goto done; }
    if (nh > MAX_FIELDS) { st = MO_FAIL(MO_ERR_INVALID, "%s: %d columns (at most %d)", path, nh, MAX_FIELDS); goto done; }
    for (int i = 0; i < nh; i++) {
        map[i] = -1;
        for (size_t k = 0; k < NCOLS; k++)
            if (!strcmp(fields[i], cols[k].name)) map[i] = (int)k;
        for (int j = 0; j < i; j++)
            if (map[i] >= 0 && map[j] == map[i]) {
                st = MO_FAIL(MO_ERR_INVALID, "%s: column '%s' appears twice in the header", path, fields[i]);
                goto done;
            }
        if (map[i] < 0 && !unknown) unknown = fields[i];
        if (map[i] == 0) version_at = i;
    }
    if (version_at < 0) {
        st = MO_FAIL(MO_ERR_INVALID, "%s: no schema_version column: not a memopt results file", path);
        goto done;
    }
    for (;;) {
        int nf = next_record(&rd, fields, MAX_FIELDS, &complete);
        if (nf == 0) break;
        if (nf < 0) { st = MO_FAIL(MO_ERR_INVALID, "%s:%d: unterminated quoted field", path, rd.line); goto done; }
        if (nf == 1 && !fields[0][0]) continue; // a blank line
        // The version first: another schema may well have other columns.
        long long ver;
        char *end;
        if (nf > version_at) {
            const char *v = fields[version_at];
            ver = strtoll(v, &end, 10);
            if (!*v || *end || ver < MO_CSV_SCHEMA_OLDEST || ver > MO_CSV_SCHEMA_VERSION) {
                st = MO_FAIL(MO_ERR_INVALID, "%s: schema_version %s, this memopt reads %d to %d", path, *v ? v : "(empty)",
                             MO_CSV_SCHEMA_OLDEST, MO_CSV_SCHEMA_VERSION);
                goto done;
            }
        }
        if (unknown) {
            st = MO_FAIL(MO_ERR_INVALID, "%s: unknown column '%s' (not in memopt's CSV schema %d)", path, unknown,
                         MO_CSV_SCHEMA_VERSION);
            goto done;
        }
        if (nf != nh) {
            st = MO_FAIL(MO_ERR_INVALID, "%s:%d: %d fields, the header has %d%s", path, rd.line, nf, nh,
                         complete ? "" : " (a torn last line?)");
            goto done;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            mo_csv_row *nr = realloc(rows, nc * sizeof *nr);
            if (!nr) { st = MO_FAIL(MO_ERR_IO, "%s: out of host memory", path); goto done; }
            rows = nr;
            cap = nc;
        }
        mo_csv_row *r = &rows[n];
        mo_csv_row_init(r);
        for (int i = 0; i < nf && st == MO_OK; i++) st = parse_cell(path, rd.line, &cols[map[i]], fields[i], r);
        if (st != MO_OK) goto done;
        st = upgrade_row(r, path, rd.line);
        if (st != MO_OK) goto done;
        n++;
    }
    if (unknown && n == 0)
        st = MO_FAIL(MO_ERR_INVALID, "%s: unknown column '%s' (not in memopt's CSV schema %d)", path, unknown,
                     MO_CSV_SCHEMA_VERSION);
done:
    free(text);
    if (st != MO_OK) { free(rows); return st; }
    *rows_out = rows;
    *n_out = n;
    return MO_OK;
}
