// Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c, built with clang by make fuzz):
// the input as a NUL-terminated string, or as a file (the parsers under test read paths).
#ifndef MEMOPT_FUZZ_UTIL_H
#define MEMOPT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A malloc'ed copy of data with a NUL after it.
static inline char *fuzz_text(const uint8_t *data, size_t n) {
    char *t = malloc(n + 1);
    if (!t) abort();
    memcpy(t, data, n);
    t[n] = '\0';
    return t;
}

// data written to this process's scratch file; returns its path.
static inline const char *fuzz_file(const uint8_t *data, size_t n, const char *ext) {
    static char path[128];
    snprintf(path, sizeof path, "/tmp/memopt_fuzz_%d%s", (int)getpid(), ext);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return path;
}

// An invariant of the code under test broke: print it and abort (libFuzzer keeps the input).
#define FUZZ_ASSERT(cond, ...)                                                        \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz invariant failed: %s: ", #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#endif
