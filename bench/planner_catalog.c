// The GPU catalog (bench/gpus.txt): a block per GPU, "field = value @ source" lines. A text format
// rather than CSV because every figure carries its source and the file carries its own
// documentation in # comments, which CSV cannot. Strict: an unknown field, a figure without a source,
// a missing field, a duplicate name, all refuse the file with the line they are on.
#include "bench/planner.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

double mo_plan_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The source tree's root: this file is <root>/bench/planner_catalog.c, and CMake hands the compiler
// absolute paths, so __FILE__ knows where the tree was at build time.
static int source_root(char *buf, size_t n) {
    const char *f = __FILE__;
    const char *slash = strrchr(f, '/');
    if (f[0] != '/' || !slash) return 0;
    size_t len = (size_t)(slash - f); // <root>/bench
    while (len > 0 && f[len - 1] != '/') len--;
    if (len == 0 || len >= n) return 0;
    memcpy(buf, f, len - 1);
    buf[len - 1] = '\0';
    return 1;
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

int mo_plan_find_file(const char *rel, char *buf, size_t n) {
    if (snprintf(buf, n, "%s", rel) < (int)n && readable(buf)) return 1;
    char exe[MO_PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(buf, n, "%s/../%s", exe, rel) < (int)n && readable(buf)) return 1;
        }
    }
    char root[MO_PATH_MAX];
    if (source_root(root, sizeof root) && snprintf(buf, n, "%s/%s", root, rel) < (int)n && readable(buf)) return 1;
    return 0;
}

// ---------------------------------------------------------------- parsing

typedef enum { K_TEXT, K_SIZE, K_NUMBER } field_kind;
typedef struct field_def {
    const char *name;
    field_kind kind;
    int required;
    unsigned flag; // MO_GPU_F_* for figures
} field_def;

static const field_def fields[] = {
    {"name", K_TEXT, 1, 0},           {"aliases", K_TEXT, 0, 0},           {"match", K_TEXT, 0, 0},
    {"memory", K_SIZE, 1, MO_GPU_F_MEMORY}, {"visible", K_SIZE, 0, MO_GPU_F_VISIBLE},
    {"fp32", K_NUMBER, 1, MO_GPU_F_FP32}, {"tf32", K_NUMBER, 1, MO_GPU_F_TF32}, {"fp16", K_NUMBER, 1, MO_GPU_F_FP16},
    {"bf16", K_NUMBER, 1, MO_GPU_F_BF16}, {"mem_bw", K_NUMBER, 1, MO_GPU_F_MEM_BW},
    {"link_gbs", K_NUMBER, 0, MO_GPU_F_LINK}, {"link", K_TEXT, 0, 0}, {"host_gbs", K_NUMBER, 0, MO_GPU_F_HOST},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

static int valid_name(const char *s) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return 0;
    return 1;
}

// Upper bounds that catch a unit slip (TB/s for GB/s) or a sparse figure doubled twice.
static double number_max(const char *field) {
    if (!strcmp(field, "mem_bw")) return 100000;   // GB/s
    if (!strcmp(field, "link_gbs")) return 100000; // GB/s
    if (!strcmp(field, "host_gbs")) return 100000; // GB/s
    if (!strcmp(field, "fp32")) return 1000;
    return 20000;                                  // tensor TFLOP/s
}

typedef struct parse_state {
    const char *where;
    mo_gpu_catalog *cat;
    unsigned seen;   // bit i: fields[i] set in the current entry
} parse_state;

static mo_status check_complete(parse_state *ps) {
    if (!ps->cat->n) return MO_OK;
    mo_gpu_spec *g = &ps->cat->gpus[ps->cat->n - 1];
    for (size_t i = 0; i < NFIELDS; i++)
        if (fields[i].required && !(ps->seen & (1u << i)))
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: [%s]: missing field '%s' (required: name, memory, fp32, tf32, fp16, bf16, mem_bw)",
                           ps->where, g->line, g->key, fields[i].name);
    if (g->visible_bytes && g->visible_bytes > g->memory_bytes + g->memory_bytes / 8)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: [%s]: visible memory exceeds the datasheet's capacity by more than 1/8", ps->where,
                       g->line, g->key);
    return MO_OK;
}

// Is name (a key or one of the aliases) already used by an entry other than `self`?
static int name_taken(const mo_gpu_catalog *c, const char *name, size_t self) {
    for (size_t i = 0; i < c->n; i++) {
        if (i == self) continue;
        if (!strcasecmp(c->gpus[i].key, name)) return 1;
        char buf[sizeof c->gpus[i].aliases];
        snprintf(buf, sizeof buf, "%s", c->gpus[i].aliases);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *a = trim(t);
            if (*a && !strcasecmp(a, name)) return 1;
        }
    }
    return 0;
}

static mo_status set_text(parse_state *ps, int line, mo_gpu_spec *g, const char *field, const char *v) {
    char *dst = !strcmp(field, "name") ? g->name : !strcmp(field, "aliases") ? g->aliases
              : !strcmp(field, "match") ? g->match : g->link;
    size_t cap = !strcmp(field, "name") ? sizeof g->name : !strcmp(field, "aliases") ? sizeof g->aliases
               : !strcmp(field, "match") ? sizeof g->match : sizeof g->link;
    if (!*v) return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: empty value", ps->where, line, field);
    if (strlen(v) >= cap) return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: longer than %zu characters", ps->where, line, field, cap - 1);
    memcpy(dst, v, strlen(v) + 1);
    if (!strcmp(field, "aliases")) {
        char buf[sizeof g->aliases];
        snprintf(buf, sizeof buf, "%s", g->aliases);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *a = trim(t);
            if (!valid_name(a))
                return MO_FAIL(MO_ERR_INVALID, "%s:%d: aliases: '%s' is not a name (letters, digits, '-', '_', '.')", ps->where, line, a);
            if (name_taken(ps->cat, a, ps->cat->n - 1) || !strcasecmp(a, g->key))
                return MO_FAIL(MO_ERR_INVALID, "%s:%d: aliases: '%s' already names a GPU", ps->where, line, a);
        }
    }
    return MO_OK;
}

static mo_status set_figure(parse_state *ps, int line, mo_gpu_spec *g, const field_def *f, char *v) {
    size_t len = strlen(v);
    if (len && v[len - 1] == '?') {
        g->unsure |= f->flag;
        v[--len] = '\0';
        while (len && isspace((unsigned char)v[len - 1])) v[--len] = '\0';
    }
    if (f->kind == K_SIZE) {
        uint64_t b = 0;
        char flag[32];
        snprintf(flag, sizeof flag, "%s", f->name);
        if (mo_size_parse(v, flag, &b) != MO_OK)
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: '%s' is not a size (like 80GB or 81559MiB)", ps->where, line, f->name, v);
        if (b < ((uint64_t)1 << 30))
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: '%s' is below 1 GiB", ps->where, line, f->name, v);
        if (!strcmp(f->name, "memory")) g->memory_bytes = b;
        else g->visible_bytes = b;
        return MO_OK;
    }
    char *end = NULL;
    errno = 0;
    double d = *v ? strtod(v, &end) : NAN;
    if (!end || *end || errno || !isfinite(d) || d < 0 || d > number_max(f->name))
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: '%s' is not a number in 0..%g", ps->where, line, f->name, v, number_max(f->name));
    if ((!strcmp(f->name, "fp32") || !strcmp(f->name, "mem_bw")) && d <= 0)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: must be positive", ps->where, line, f->name);
    // A host link of 0 would time every offloaded copy as forever: unknown is the field left out.
    if (!strcmp(f->name, "host_gbs") && d <= 0)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: host_gbs: must be positive (leave the field out when the rate is unknown)",
                       ps->where, line);
    if (!strcmp(f->name, "fp32")) g->fp32 = d;
    else if (!strcmp(f->name, "tf32")) g->tf32 = d;
    else if (!strcmp(f->name, "fp16")) g->fp16 = d;
    else if (!strcmp(f->name, "bf16")) g->bf16 = d;
    else if (!strcmp(f->name, "mem_bw")) g->mem_bw_gbs = d;
    else if (!strcmp(f->name, "host_gbs")) g->host_gbs = d;
    else g->link_gbs = d;
    return MO_OK;
}

static mo_status parse_line(parse_state *ps, int line, char *s) {
    mo_gpu_catalog *c = ps->cat;
    if (*s == '[') {
        MO_TRY(check_complete(ps));
        char *close = strchr(s, ']');
        if (!close || trim(close + 1)[0])
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: expected '[key]' alone on the line", ps->where, line);
        *close = '\0';
        char *key = trim(s + 1);
        if (!valid_name(key) || strlen(key) >= sizeof c->gpus[0].key)
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: [%s]: not a GPU key (letters, digits, '-', '_', '.'; at most 31)", ps->where, line, key);
        if (name_taken(c, key, (size_t)-1))
            return MO_FAIL(MO_ERR_INVALID, "%s:%d: [%s]: the name is already used by another entry", ps->where, line, key);
        mo_gpu_spec *ng = realloc(c->gpus, (c->n + 1) * sizeof *ng);
        if (!ng) return MO_FAIL(MO_ERR_INTERNAL, "out of host memory reading %s", ps->where);
        c->gpus = ng;
        mo_gpu_spec *g = &c->gpus[c->n++];
        memset(g, 0, sizeof *g);
        snprintf(g->key, sizeof g->key, "%s", key);
        g->line = line;
        ps->seen = 0;
        return MO_OK;
    }
    if (!c->n) return MO_FAIL(MO_ERR_INVALID, "%s:%d: a field before the first '[key]' line", ps->where, line);
    mo_gpu_spec *g = &c->gpus[c->n - 1];
    char *eq = strchr(s, '=');
    if (!eq) return MO_FAIL(MO_ERR_INVALID, "%s:%d: expected 'field = value @ source'", ps->where, line);
    *eq = '\0';
    char *name = trim(s), *value = eq + 1, *source = NULL;
    char *at = strchr(value, '@');
    if (at) {
        *at = '\0';
        source = trim(at + 1);
    }
    value = trim(value);
    const field_def *f = NULL;
    size_t fi = 0;
    for (; fi < NFIELDS && !f; fi++)
        if (!strcmp(name, fields[fi].name)) f = &fields[fi];
    if (!f)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: unknown field '%s' (accepted: name, aliases, match, memory, visible, fp32, tf32, fp16, bf16, mem_bw, link_gbs, link, host_gbs)",
                       ps->where, line, name);
    fi--;
    if (ps->seen & (1u << fi)) return MO_FAIL(MO_ERR_INVALID, "%s:%d: [%s]: field '%s' given twice", ps->where, line, g->key, name);
    ps->seen |= 1u << fi;
    if (f->kind == K_TEXT) {
        if (source) return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: a text field takes no '@ source'", ps->where, line, name);
        return set_text(ps, line, g, name, value);
    }
    if (!source || !*source)
        return MO_FAIL(MO_ERR_INVALID, "%s:%d: %s: no source (write '%s = %s @ where the figure comes from')", ps->where, line, name,
                       name, *value ? value : "VALUE");
    return set_figure(ps, line, g, f, value);
}

mo_status mo_gpu_catalog_parse(const char *text, const char *where, mo_gpu_catalog *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", where);
    parse_state ps = {where, out, 0};
    mo_status st = MO_OK;
    int line = 0;
    for (const char *p = text; *p && st == MO_OK;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        char buf[1024];
        if (len >= sizeof buf) {
            st = MO_FAIL(MO_ERR_INVALID, "%s:%d: line longer than %zu characters", where, line, sizeof buf - 1);
            break;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *s = trim(buf);
        if (*s) st = parse_line(&ps, line, s);
        p = nl ? nl + 1 : p + len;
    }
    if (st == MO_OK) st = check_complete(&ps);
    if (st == MO_OK && !out->n) st = MO_FAIL(MO_ERR_INVALID, "%s: no GPU entries ('[key]' lines)", where);
    if (st != MO_OK) mo_gpu_catalog_free(out);
    return st;
}

mo_status mo_gpu_catalog_load(const char *path, mo_gpu_catalog *out) {
    memset(out, 0, sizeof *out);
    char found[MO_PATH_MAX];
    const char *env = getenv("MEMOPT_GPU_CATALOG");
    if (path && *path) snprintf(found, sizeof found, "%s", path);
    else if (env && *env) snprintf(found, sizeof found, "%s", env);
    else if (!mo_plan_find_file("bench/gpus.txt", found, sizeof found))
        return MO_FAIL(MO_ERR_INVALID, "--gpu: the GPU catalog bench/gpus.txt was not found (run from the source tree, or set MEMOPT_GPU_CATALOG; or plan with --mem SIZE)");
    FILE *f = fopen(found, "r");
    if (!f) return MO_FAIL(MO_ERR_INVALID, "--gpu: cannot open the GPU catalog %s: %s", found, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + k + 1 > cap) {
            size_t nc = cap ? 2 * cap : 16384;
            while (nc < len + k + 1) nc *= 2;
            char *nt = realloc(text, nc);
            if (!nt) { free(text); fclose(f); return MO_FAIL(MO_ERR_INTERNAL, "out of host memory reading %s", found); }
            text = nt;
            cap = nc;
        }
        memcpy(text + len, chunk, k);
        len += k;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(text); return MO_FAIL(MO_ERR_INVALID, "--gpu: error reading %s", found); }
    if (!text) return MO_FAIL(MO_ERR_INVALID, "%s: empty GPU catalog", found);
    text[len] = '\0';
    mo_status st = mo_gpu_catalog_parse(text, found, out);
    free(text);
    return st;
}

void mo_gpu_catalog_free(mo_gpu_catalog *c) {
    free(c->gpus);
    c->gpus = NULL;
    c->n = 0;
}

const mo_gpu_spec *mo_gpu_catalog_find(const mo_gpu_catalog *c, const char *name) {
    for (size_t i = 0; i < c->n; i++) {
        if (!strcasecmp(c->gpus[i].key, name)) return &c->gpus[i];
        char buf[sizeof c->gpus[i].aliases];
        snprintf(buf, sizeof buf, "%s", c->gpus[i].aliases);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!strcasecmp(trim(t), name)) return &c->gpus[i];
    }
    return NULL;
}

// needle occurs in hay with no letter or digit right before or after it.
static int word_match(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (!n) return 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) {
        int before = p > hay && isalnum((unsigned char)p[-1]);
        int after = isalnum((unsigned char)p[n]);
        if (!before && !after) return 1;
    }
    return 0;
}

const mo_gpu_spec *mo_gpu_catalog_match_device(const mo_gpu_catalog *c, const char *device_name) {
    const mo_gpu_spec *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < c->n; i++) {
        char buf[sizeof c->gpus[i].match];
        snprintf(buf, sizeof buf, "%s", c->gpus[i].match);
        char *save = NULL;
        for (char *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
            char *m = trim(t);
            // The longest match wins: "H100 PCIe" over a shorter string another entry might share.
            if (word_match(device_name, m) && strlen(m) > best_len) {
                best = &c->gpus[i];
                best_len = strlen(m);
            }
        }
    }
    return best;
}

const char *mo_gpu_catalog_names(const mo_gpu_catalog *c, char *buf, size_t n) {
    buf[0] = '\0';
    for (size_t i = 0; i < c->n; i++) {
        if (i) strncat(buf, ", ", n - strlen(buf) - 1);
        strncat(buf, c->gpus[i].key, n - strlen(buf) - 1);
    }
    return buf;
}

double mo_gpu_gemm_tflops(const mo_gpu_spec *g, mo_precision p, const char **note) {
    if (note) *note = NULL;
    switch (p) {
    case MO_PREC_FP32: return g->fp32;
    case MO_PREC_TF32:
        if (g->tf32 > 0) return g->tf32;
        if (note) *note = "no TF32 on this GPU: fp32 GEMMs on CUDA cores";
        return g->fp32;
    case MO_PREC_FP16:
        if (g->fp16 > 0) return g->fp16;
        if (note) *note = "no FP16 tensor cores on this GPU";
        return g->fp32;
    case MO_PREC_BF16:
        if (g->bf16 > 0) return g->bf16;
        if (note) *note = "no BF16 on this GPU: emulated at the fp32 rate at best";
        return g->fp32;
    }
    return g->fp32;
}

uint64_t mo_gpu_total_bytes(const mo_gpu_spec *g) { return g->visible_bytes ? g->visible_bytes : g->memory_bytes; }
