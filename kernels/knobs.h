// The MEMOPT_* environment variables that change what a run does (kernels/ctx.c, strategies/alloc.c
// read them), listed once: a results row records the set ones (the CSV's knobs column), so that two
// runs with different settings never look alike. Variables that only say where things are or how a
// test runs (MEMOPT_GIT_REV, MEMOPT_GPU_CATALOG, MEMOPT_PLOT_SCRIPTS, MEMOPT_TEST_*) are not knobs.
// Any other MEMOPT_ variable is ignored: nothing reads it, so it is not recorded.
#ifndef MEMOPT_KNOBS_H
#define MEMOPT_KNOBS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mo_knob {
    const char *name;   // "MEMOPT_FUSE_EPILOGUES"
    const char *what;   // what it changes, one line (README's knob list says the same)
} mo_knob;

// The table, sorted by name; *n gets its length.
const mo_knob *mo_knobs(size_t *n);

// The knobs set (non-empty) in the environment now, "NAME=value;NAME=value" sorted by name, "" when
// none; cut short (still NUL-terminated) when buf is short. Returns buf.
const char *mo_knobs_text(char *buf, size_t n);

// Adds NAME=value to a knobs text ("NAME=value;..." sorted by name; n bytes of room) at its sorted place.
// Returns 0 (also when NAME is already there: the text is left as it was), or -1 when the result would
// not fit n bytes (or no memory): the text is left as it was.
int mo_knobs_insert(char *text, size_t n, const char *name, const char *value);

// Replaying a results row as it ran: sets every knob of the table to its value in text (a row's knobs
// cell) and unsets the others, after copying the knobs set now into saved (saved_n bytes; a
// mo_knobs_text); mo_knobs_apply(saved, ...) then puts them back. MEMOPT_FAIL_ALLOC is left alone
// (the fault injection is armed once a process, for its own allocations). Returns 0, or -1 when saved is too
// short to hold them (nothing is changed then).
int mo_knobs_apply(const char *text, char *saved, size_t saved_n);

#ifdef __cplusplus
}
#endif

#endif
