// MEMOPT_POISON_ALLOC=1 (strategies/alloc.c): every block mo_alloc hands out is all 0xff bytes, the first
// time and again when a freed block is reused, under the caching and the raw allocator, the cpu backend's
// host (offload) allocators too; the dry backend
// hands out addresses only. (The knob is read once per process: this test sets it before any allocator.)
#include <stdlib.h>
#include <string.h>
#include "strategies/alloc.h"
#include "tests/testlib.h"

static int all_ff(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xff) return 0;
    return 1;
}

static void poisoned(mo_alloc_kind kind, int host, const char *what) {
    mo_allocator *a = NULL;
    if (!CHECK_OK(host ? mo_allocator_create_host_kind(&a, kind, MO_BACKEND_CPU)
                       : mo_allocator_create(&a, kind, MO_BACKEND_CPU, 0, NULL)))
        return;
    const size_t sizes[] = {1, 7, 512, 4096, 3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        if (!CHECK_OK(mo_alloc(a, sizes[i], MO_CAT_ACTIVATION, &p))) continue;
        CHECK_MSG(all_ff(p, sizes[i]), "%s: a new block of %zu bytes is not all 0xff", what, sizes[i]);
        memset(p, 0, sizes[i]); // the tensor written, then freed: the next block of this size may be it
        CHECK_OK(mo_free(a, p));
        void *q = NULL;
        if (!CHECK_OK(mo_alloc(a, sizes[i], MO_CAT_ACTIVATION, &q))) continue;
        CHECK_MSG(all_ff(q, sizes[i]), "%s: a reused block of %zu bytes (%s) kept what its last owner wrote", what,
                  sizes[i], q == p ? "the same address" : "another address");
        CHECK_OK(mo_free(a, q));
    }
    mo_allocator_destroy(a);
}

int main(void) {
    setenv("MEMOPT_POISON_ALLOC", "1", 1);
    poisoned(MO_ALLOC_CACHING, 0, "caching");
    poisoned(MO_ALLOC_RAW, 0, "raw");
    poisoned(MO_ALLOC_CACHING, 1, "cpu host (offload's) caching"); // cuda's pinned host blocks are not filled
    poisoned(MO_ALLOC_RAW, 1, "cpu host raw");
    mo_allocator *d = NULL;
    void *p = NULL;
    CHECK_OK(mo_allocator_create(&d, MO_ALLOC_CACHING, MO_BACKEND_DRY, 0, NULL));
    if (d) {
        CHECK_OK(mo_alloc(d, 1 << 30, MO_CAT_ACTIVATION, &p)); // dry: an address, no memory to fill
        CHECK(p != NULL);
        CHECK_OK(mo_free(d, p));
        mo_allocator_destroy(d);
    }
    return test_finish();
}
