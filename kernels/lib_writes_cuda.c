// mo_mark_lib_write (lib_writes.h): a cleared region before a library call writes it, for initcheck.
#include "lib_writes.h"

mo_status mo_mark_lib_write(mo_ctx *c, const void *p, size_t pitch_bytes, size_t width_bytes, size_t rows) {
    return mo_mark_lib_write_on(c, c->stream, p, pitch_bytes, width_bytes, rows);
}

mo_status mo_mark_lib_write_on(mo_ctx *c, void *stream, const void *p, size_t pitch_bytes, size_t width_bytes,
                               size_t rows) {
    if (!c->mark_lib_writes || c->backend != MO_BACKEND_CUDA || !p || !width_bytes || !rows) return MO_OK;
    MO_TRY(mo_lib_write_zero_cuda(stream, (void *)p, pitch_bytes, width_bytes, rows));
    return MO_OK;
}
