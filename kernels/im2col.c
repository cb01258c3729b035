// The plain-C references of im2col and its col2im gather (resnet_ops_impl.h), fp32, NHWC. The cuda
// kernels (im2col.cu) do the same: conv_cuda.c runs fp32 convolutions that are not 1x1 stride-1 as
// cuBLASLt GEMMs over these column matrices, a chunk at a time in the workspace.
//
// The column matrix of a convolution s (input x (N, H, W, C), filter (K, R, S, C)) has a row per output
// position m = (n, p, q) of (N, P, Q) and a column per filter tap (r, s, c) of (R, S, C), the filter's own
// layout: col[m][(r S + s) C + c] = x[n, p st - pad + r, q st - pad + s, c], 0 in the padding. Then
//   out (M, K)  = col (M, RSC) @ w (K, RSC)^T       the forward
//   dw (K, RSC) += dout (M, K)^T @ col (M, RSC)      the weight gradient
//   dcol (M, RSC) = dout (M, K) @ w (K, RSC)         and din = col2im(dcol), the input gradient
// where col2im sends every column entry back to the input element it was copied from, summed.
#include "resnet_ops_impl.h"

// col (rows, R, S, C) = rows m0 .. m0 + rows - 1 of x's column matrix (x: all N images)
void conv_im2col_cpu(float *col, const float *x, const mo_conv_shape *s, int m0, int rows) {
    const int H = s->H, W = s->W, C = s->C, R = s->R, S = s->S, st = s->stride, pad = s->pad, P = s->P, Q = s->Q;
    for (int i = 0; i < rows; i++) {
        const int m = m0 + i, q = m % Q, p = (m / Q) % P, n = m / (P * Q);
        float *row = col + (size_t)i * R * S * C;
        for (int r = 0; r < R; r++)
            for (int t = 0; t < S; t++) {
                const int h = p * st - pad + r, w = q * st - pad + t;
                float *dst = row + ((size_t)r * S + t) * C;
                const int inside = h >= 0 && h < H && w >= 0 && w < W;
                const float *src = x + (((size_t)n * H + (inside ? h : 0)) * W + (inside ? w : 0)) * C;
                for (int c = 0; c < C; c++) dst[c] = inside ? src[c] : 0.0f;
            }
    }
}

// din (n, H, W, C) = col2im of dcol (n P Q, R, S, C): din[b, h, w, c] = the sum, r then s ascending from
// 0.0f, of dcol[(b, p, q), (r, s, c)] over the taps with h = p st - pad + r and w = q st - pad + s
// (0 where no tap reaches: a strided convolution's skipped rows and columns)
void conv_col2im_cpu(float *din, const float *dcol, const mo_conv_shape *s, int n) {
    const int H = s->H, W = s->W, C = s->C, R = s->R, S = s->S, st = s->stride, pad = s->pad, P = s->P, Q = s->Q;
    const size_t rsc = (size_t)R * S * C;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++)
                for (int c = 0; c < C; c++) {
                    float acc = 0.0f;
                    for (int r = 0; r < R; r++) {
                        const int ph = h + pad - r;
                        if (ph < 0 || ph % st != 0 || ph / st >= P) continue;
                        for (int t = 0; t < S; t++) {
                            const int qw = w + pad - t;
                            if (qw < 0 || qw % st != 0 || qw / st >= Q) continue;
                            const size_t m = ((size_t)b * P + ph / st) * Q + qw / st;
                            acc += dcol[m * rsc + ((size_t)r * S + t) * C + c];
                        }
                    }
                    din[(((size_t)b * H + h) * W + w) * C + c] = acc;
                }
}
