// Parsing and printing of memory sizes and caps: "24GiB", "512MiB", "1.5GB", "0.5", "none".
#include "alloc.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *mo_alloc_kind_name(mo_alloc_kind k) {
    switch (k) {
    case MO_ALLOC_CACHING: return "caching";
    case MO_ALLOC_ASYNC: return "async";
    case MO_ALLOC_RAW: return "raw";
    }
    return "?";
}

mo_status mo_alloc_kind_parse(const char *s, mo_alloc_kind *out) {
    if (!strcmp(s, "caching")) { *out = MO_ALLOC_CACHING; return MO_OK; }
    if (!strcmp(s, "async")) { *out = MO_ALLOC_ASYNC; return MO_OK; }
    if (!strcmp(s, "raw")) { *out = MO_ALLOC_RAW; return MO_OK; }
    return MO_FAIL(MO_ERR_INVALID, "--alloc: unknown value '%s' (accepted: caching, async, raw)", s);
}

const char *mo_category_name(mo_category c) {
    static const char *names[MO_CAT_COUNT] = {"param", "grad", "optim", "master", "activation", "workspace"};
    return (unsigned)c < MO_CAT_COUNT ? names[c] : "?";
}

mo_status mo_size_parse(const char *s, const char *flag, uint64_t *out) {
    char *end = NULL;
    // strtod would also take hex ("0x10"): decimal digits only.
    if (!s || !*s || !(isdigit((unsigned char)s[0]) || s[0] == '.') || strpbrk(s, "xX"))
        return MO_FAIL(MO_ERR_INVALID, "%s: '%s' is not a size (accepted: bytes, or a number with B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", flag, s ? s : "");
    double v = strtod(s, &end);
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!strcasecmp(end, units[i].unit) && (units[i].unit[0] || strchr(s, '.') == NULL)) {
            double b = v * units[i].mult;
            // Byte counts are int64 in the CSV and the statistics: 2^63 and above would wrap.
            if (!isfinite(b) || b < 0 || b >= 9223372036854775808.0)
                return MO_FAIL(MO_ERR_INVALID, "%s: '%s' is out of range (accepted: a size below 2^63 bytes, 8 EiB)", flag, s);
            *out = (uint64_t)llround(b);
            return MO_OK;
        }
    }
    return MO_FAIL(MO_ERR_INVALID, "%s: '%s' is not a size (accepted: bytes, or a number with B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", flag, s);
}

mo_status mo_cap_parse(const char *s, mo_cap *out) {
    memset(out, 0, sizeof *out);
    if (!strcmp(s, "none") || !strcmp(s, "0")) return MO_OK;
    char *end = (char *)s;
    // strtod would also take hex ("0x0.8") and leading spaces: a decimal number only.
    double v = strpbrk(s, "xXpP") || isspace((unsigned char)s[0]) ? NAN : strtod(s, &end);
    // A plain number with a decimal point, or a number at most 1, is a fraction of device memory.
    if (end != s && *end == '\0' && (strchr(s, '.') || v <= 1.0)) {
        if (!(v > 0.0 && v <= 1.0))
            return MO_FAIL(MO_ERR_INVALID, "--cap: fraction '%s' must be in (0, 1] (accepted: none, a fraction like 0.5, or a size like 24GiB)", s);
        out->kind = 1;
        out->fraction = v;
        return MO_OK;
    }
    uint64_t b = 0;
    mo_status st = mo_size_parse(s, "--cap", &b);
    if (st != MO_OK && strstr(mo_errmsg(), "out of range")) return st; // its message says the range
    if (st != MO_OK || b == 0)
        return MO_FAIL(MO_ERR_INVALID, "--cap: '%s' is not a cap (accepted: none, a fraction like 0.5, or a size like 24GiB, 512MiB)", s);
    out->kind = 2;
    out->bytes = b;
    return MO_OK;
}

uint64_t mo_cap_resolve(const mo_cap *cap, uint64_t device_total_bytes) {
    switch (cap->kind) {
    case 1: return (uint64_t)(cap->fraction * (double)device_total_bytes);
    case 2: return cap->bytes;
    default: return 0;
    }
}

const char *mo_format_bytes(uint64_t bytes, char *buf, size_t n) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 4) { v /= 1024.0; i++; }
    if (i == 0) snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, n, "%.2f %s", v, u[i]);
    return buf;
}
