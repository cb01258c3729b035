// Device-buffer helpers of the GPU kernel tests, shared so each test file does not carry its own copy.
// The including file declares its context first: `static mo_ctx *gc;` (the cuda context whose
// allocator serves the buffers). A failed allocation or copy ends the test (test_finish's exit code):
// nothing after it could be checked.
#ifndef MEMOPT_TESTS_DEVMEM_H
#define MEMOPT_TESTS_DEVMEM_H

#include <stdlib.h>
#include "kernels/ctx.h"
#include "strategies/alloc.h"
#include "tests/testlib.h"

static void *dnew(size_t bytes) {
    void *p = NULL;
    if (!CHECK_OK(mo_alloc(gc->alloc, bytes ? bytes : 1, MO_CAT_ACTIVATION, &p))) exit(test_finish());
    return p;
}
static void dfree(void *p) {
    if (p && mo_free(gc->alloc, p) != MO_OK) CHECK_MSG(0, "mo_free: %s", mo_errmsg());
}
static void h2d(void *d, const void *h, size_t bytes) {
    if (!CHECK_OK(mo_memcpy_h2d(gc, d, h, bytes))) exit(test_finish());
}
static void d2h(void *h, const void *d, size_t bytes) {
    if (!CHECK_OK(mo_memcpy_d2h(gc, h, d, bytes))) exit(test_finish());
}
static void *dup_dev(const void *h, size_t bytes) {
    void *d = dnew(bytes);
    h2d(d, h, bytes);
    return d;
}

#endif
