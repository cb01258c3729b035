// The stored cuDNN engine choices of the convolutions (conv_table.h): one line per convolution whose
// best timed candidate beat the first kept heuristic candidate by at least CONV_TUNE_MIN_GAIN in a
// tuning run (MEMOPT_CONV_TUNE=1 ..., "conv-tune:" lines on stderr), pasted as they are, the run named
// above each group. A key no line matches takes the first kept candidate.
// Fields: device, cuDNN version, key {kind, dt, tf32, N, H, W, C, K, R, S, stride, pad, alignments of x, w,
// y, beta_one, workspace}, engine global index, rank among the kept candidates, first's and its median ms.
#include "conv_table.h"

const mo_conv_choice mo_conv_table[] = {
    // tools/gpu_session.sh stage convtune at 41de208 on the H200, 2026-12-03: ResNet-50 batch 128, 224x224 (the
    // tf32, bf16 runs and the start of fp16's; in fp32 the first kept candidate won every convolution)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 58, 1, 0.1762f, 0.1600f}, // forward 9.2% faster (of 5 kept)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 67, 1, 0.0684f, 0.0643f}, // forward 6.0% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 7, 7, 512, 2048, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 71, 1, 0.0640f, 0.0633f}, // backward data 1.1% faster (of 5 kept)
    {"NVIDIA H200", 91400, {2, 0, 1, 128, 14, 14, 1024, 512, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 68, 1, 0.1694f, 0.1553f}, // backward filter 8.4% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 14, 14, 1024, 512, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 71, 1, 0.1244f, 0.1045f}, // backward data 16.0% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 71, 1, 0.0638f, 0.0606f}, // backward data 5.0% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 76, 1, 0.1083f, 0.1070f}, // backward data 1.2% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 71, 1, 0.1611f, 0.1397f}, // backward data 13.3% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 256, 256, 0, 33554432}, 76, 1, 0.1488f, 0.1448f}, // backward data 2.7% faster (of 4 kept)
    {"NVIDIA H200", 91400, {0, 2, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 33554432}, 58, 1, 0.0987f, 0.0859f}, // forward 13.0% faster (of 5 kept)
    {"NVIDIA H200", 91400, {2, 2, 0, 128, 7, 7, 512, 2048, 1, 1, 1, 0, 256, 256, 256, 0, 33554432}, 65, 1, 0.0338f, 0.0316f}, // backward filter 6.6% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 14, 14, 1024, 512, 1, 1, 1, 0, 256, 128, 256, 0, 33554432}, 78, 4, 0.0546f, 0.0536f}, // backward data 1.8% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 14, 14, 256, 256, 3, 3, 1, 1, 256, 128, 256, 0, 33554432}, 78, 4, 0.0532f, 0.0526f}, // backward data 1.2% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 128, 256, 0, 33554432}, 78, 4, 0.0426f, 0.0407f}, // backward data 4.4% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 28, 28, 128, 128, 3, 3, 1, 1, 256, 128, 256, 0, 33554432}, 78, 6, 0.0562f, 0.0533f}, // backward data 5.2% faster (of 7 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 33554432}, 67, 1, 0.0740f, 0.0721f}, // backward data 2.5% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 128, 256, 0, 33554432}, 73, 1, 0.0882f, 0.0847f}, // backward data 4.0% faster (of 8 kept)
    {"NVIDIA H200", 91400, {2, 2, 0, 128, 224, 224, 3, 64, 7, 7, 2, 3, 256, 256, 256, 0, 33554432}, 1, 1, 8.2412f, 4.7308f}, // backward filter 42.6% faster (of 3 kept)
    {"NVIDIA H200", 91400, {0, 1, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 33554432}, 58, 1, 0.0970f, 0.0821f}, // forward 15.3% faster (of 5 kept)
    // tools/gpu_session.sh stage resnetws at 07ab996 on an H100, 2026-12-06 (session 20, call 2): ResNet-50 batch
    // 128, 224x224, at the ResNet's 256 MiB budget (the fp32, tf32, bf16 and fp16 ckpt none runs)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 0, 0, 128, 14, 14, 256, 256, 3, 3, 1, 1, 256, 256, 256, 0, 268435456}, 18, 3, 0.4024f, 0.3764f}, // backward filter 6.5% faster (of 5 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {0, 0, 1, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 67, 1, 0.1037f, 0.0989f}, // forward 4.7% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {0, 0, 1, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 67, 1, 0.0675f, 0.0656f}, // forward 2.8% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 14, 14, 1024, 512, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 71, 1, 0.1063f, 0.1028f}, // backward data 3.3% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 76, 1, 0.1119f, 0.1108f}, // backward data 1.1% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 76, 1, 0.1101f, 0.1080f}, // backward data 1.9% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 76, 2, 0.2474f, 0.2407f}, // backward data 2.7% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 71, 1, 0.1943f, 0.1838f}, // backward data 5.4% faster (of 5 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 0, 1, 128, 56, 56, 256, 64, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 76, 2, 0.2025f, 0.1982f}, // backward data 2.1% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {0, 2, 0, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 71, 6, 0.0596f, 0.0573f}, // forward 3.9% faster (of 7 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 2, 0, 128, 7, 7, 512, 2048, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 65, 1, 0.0315f, 0.0306f}, // backward filter 2.7% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 2, 0, 128, 7, 7, 2048, 512, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 70, 6, 0.0924f, 0.0425f}, // backward filter 54.0% faster (of 7 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 2, 0, 128, 14, 14, 1024, 2048, 1, 1, 2, 0, 256, 256, 256, 0, 268435456}, 70, 3, 0.0617f, 0.0525f}, // backward filter 14.8% faster (of 4 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 2, 0, 128, 28, 28, 512, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 4, 0.0711f, 0.0689f}, // backward data 3.1% faster (of 5 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 2, 0, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 4, 0.0592f, 0.0585f}, // backward data 1.3% faster (of 5 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 2, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.1075f, 0.1011f}, // backward data 6.0% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {0, 1, 0, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 71, 6, 0.0587f, 0.0567f}, // forward 3.3% faster (of 7 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 1, 0, 128, 7, 7, 512, 2048, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 65, 1, 0.0341f, 0.0326f}, // backward filter 4.4% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 7, 7, 2048, 512, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.0333f, 0.0320f}, // backward data 4.0% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 1, 0, 128, 14, 14, 1024, 2048, 1, 1, 2, 0, 256, 256, 256, 0, 268435456}, 70, 3, 0.0670f, 0.0605f}, // backward filter 9.7% faster (of 4 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 28, 28, 512, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.0700f, 0.0676f}, // backward data 3.4% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.0561f, 0.0517f}, // backward data 7.7% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.0584f, 0.0559f}, // backward data 4.4% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {2, 1, 0, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 65, 1, 0.1293f, 0.1239f}, // backward filter 4.2% faster (of 8 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.1232f, 0.1217f}, // backward data 1.2% faster (of 6 kept)
    {"NVIDIA H100 80GB HBM3", 91400, {1, 1, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.1032f, 0.0983f}, // backward data 4.8% faster (of 8 kept)
    // tools/gpu_session.sh stage convtune, ccebb74, 2026-12-06: ResNet-50 batch 128, 224x224
    {"NVIDIA H200", 91400, {0, 2, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 58, 1, 0.0949f, 0.0848f}, // forward 10.7% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 4, 0.0345f, 0.0338f}, // backward data 1.9% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 14, 14, 256, 256, 3, 3, 1, 1, 256, 128, 256, 0, 268435456}, 78, 4, 0.0603f, 0.0544f}, // backward data 9.8% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 14, 14, 1024, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 4, 0.0402f, 0.0388f}, // backward data 3.4% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 4, 0.0479f, 0.0444f}, // backward data 7.4% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 28, 28, 128, 128, 3, 3, 1, 1, 256, 128, 256, 0, 268435456}, 78, 7, 0.0619f, 0.0582f}, // backward data 5.9% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.1007f, 0.0996f}, // backward data 1.1% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0791f, 0.0772f}, // backward data 2.5% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 128, 256, 0, 268435456}, 73, 1, 0.0916f, 0.0878f}, // backward data 4.2% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 2, 0, 128, 56, 56, 256, 64, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0880f, 0.0871f}, // backward data 1.0% faster (of 6 kept)
    {"NVIDIA H200", 91400, {0, 1, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 58, 1, 0.1005f, 0.0890f}, // forward 11.5% faster (of 6 kept)
    {"NVIDIA H200", 91400, {2, 1, 0, 128, 7, 7, 512, 2048, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 65, 1, 0.0396f, 0.0316f}, // backward filter 20.1% faster (of 6 kept)
    {"NVIDIA H200", 91400, {2, 1, 0, 128, 14, 14, 1024, 2048, 1, 1, 2, 0, 256, 256, 256, 0, 268435456}, 70, 3, 0.0481f, 0.0461f}, // backward filter 4.1% faster (of 4 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 78, 5, 0.0472f, 0.0407f}, // backward data 13.6% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0504f, 0.0492f}, // backward data 2.4% faster (of 6 kept)
    {"NVIDIA H200", 91400, {2, 1, 0, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 65, 1, 0.1047f, 0.0922f}, // backward filter 11.9% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 56, 56, 256, 128, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0994f, 0.0975f}, // backward data 1.8% faster (of 6 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0803f, 0.0766f}, // backward data 4.5% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 128, 256, 0, 268435456}, 73, 1, 0.0958f, 0.0905f}, // backward data 5.6% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 1, 0, 128, 56, 56, 256, 64, 1, 1, 1, 0, 256, 128, 256, 0, 268435456}, 67, 1, 0.0891f, 0.0875f}, // backward data 1.8% faster (of 7 kept)
    {"NVIDIA H200", 91400, {2, 0, 0, 128, 14, 14, 256, 256, 3, 3, 1, 1, 256, 256, 256, 0, 268435456}, 18, 3, 0.3789f, 0.3660f}, // backward filter 3.4% faster (of 5 kept)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 58, 1, 0.1787f, 0.1654f}, // forward 7.4% faster (of 8 kept)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 28, 28, 128, 512, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 67, 1, 0.0941f, 0.0884f}, // forward 6.0% faster (of 8 kept)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 28, 28, 512, 128, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 67, 1, 0.0982f, 0.0812f}, // forward 17.3% faster (of 8 kept)
    {"NVIDIA H200", 91400, {0, 0, 1, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 67, 1, 0.0678f, 0.0636f}, // forward 6.2% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 14, 14, 1024, 512, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 71, 1, 0.1266f, 0.1051f}, // backward data 17.0% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 14, 14, 256, 1024, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 71, 1, 0.0644f, 0.0618f}, // backward data 4.1% faster (of 8 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 56, 56, 64, 256, 1, 1, 1, 0, 256, 256, 256, 0, 268435456}, 71, 1, 0.1437f, 0.1351f}, // backward data 6.0% faster (of 5 kept)
    {"NVIDIA H200", 91400, {1, 0, 1, 128, 56, 56, 64, 64, 3, 3, 1, 1, 256, 256, 256, 0, 268435456}, 76, 1, 0.1508f, 0.1468f}, // backward data 2.7% faster (of 8 kept)
    {NULL, 0, {0}, 0, 0, 0.0f, 0.0f}, // end (C has no empty arrays)
};
const int mo_conv_table_n = (int)(sizeof mo_conv_table / sizeof mo_conv_table[0]) - 1;

int mo_conv_key_eq(const mo_conv_key *x, const mo_conv_key *y) {
    return x->kind == y->kind && x->dt == y->dt && x->tf32 == y->tf32 && x->N == y->N && x->H == y->H &&
           x->W == y->W && x->C == y->C && x->K == y->K && x->R == y->R && x->S == y->S && x->stride == y->stride &&
           x->pad == y->pad && x->al_x == y->al_x && x->al_w == y->al_w && x->al_y == y->al_y &&
           x->beta_one == y->beta_one && x->ws_bytes == y->ws_bytes;
}
