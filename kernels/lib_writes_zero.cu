// The mark of lib_writes.h as a kernel of ours: zero rows x width bytes at p, rows pitch bytes apart.
// Why not cudaMemsetAsync / cudaMemset2DAsync, which the mark used until session 19: under
// compute-sanitizer initcheck (the only place the mark is on) one cudaMemset2DAsync over a GEMM output
// of a small GPT took 874-3015 ms (0.16 ms without the tool), this kernel 0.1-3.4 ms over the same
// region (bench/probes/sanitizer_launch_cost.cu beside a sanitizer pass on the same GPU,
// results/h100-sanitize-session19.log); a forward and backward of
// a 3-block GPT went from about 40 s to 0.1-0.4 s. A kernel's stores mark the bytes initialized the same way.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "lib_writes.h"

// (rows, width_words) of W at p, rows pitch_words apart, zeroed; grid-stride
template <typename W>
__global__ void lib_write_zero_kernel(W *p, size_t pitch_words, size_t width_words, size_t rows) {
    const size_t total = rows * width_words;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / width_words, c = i - r * width_words;
        p[r * pitch_words + c] = W{};
    }
}

template <typename W>
static mo_status launch(void *p, size_t pitch, size_t width, size_t rows, cudaStream_t s) {
    const size_t words = rows * (width / sizeof(W));
    const unsigned blocks = (unsigned)(words / 256 + 1 < 1024 ? words / 256 + 1 : 1024);
    lib_write_zero_kernel<W><<<blocks, 256, 0, s>>>((W *)p, pitch / sizeof(W), width / sizeof(W), rows);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// The widest store (16, 8, 4, 2 or 1 bytes) that p, the pitch (when there is more than one row) and the
// width are all multiples of.
extern "C" mo_status mo_lib_write_zero_cuda(void *stream, void *p, size_t pitch, size_t width, size_t rows) {
    if (!p || !width || !rows) return MO_OK;
    if (rows > 1 && pitch < width)
        return MO_FAIL(MO_ERR_INVALID, "mo_lib_write_zero_cuda: pitch %zu below the width %zu", pitch, width);
    const uintptr_t a = (uintptr_t)p | width | (rows > 1 ? pitch : 0);
    cudaStream_t s = (cudaStream_t)stream;
    if (!(a & 15)) return launch<uint4>(p, pitch, width, rows, s);
    if (!(a & 7)) return launch<uint2>(p, pitch, width, rows, s);
    if (!(a & 3)) return launch<uint32_t>(p, pitch, width, rows, s);
    if (!(a & 1)) return launch<uint16_t>(p, pitch, width, rows, s);
    return launch<uint8_t>(p, pitch, width, rows, s);
}
