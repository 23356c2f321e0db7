// CUDA kernels of motionvl's fused ops (models/src/fused/), compiled to PTX with the crate by
// models/build.rs when the `cuda` feature is on, and launched from models/src/fused/cuda.rs.
// Each computes what the CPU kernel beside its Rust op computes, in the same order of operations
// within an element; only the order of the sums over a row or a column differs.
//
// Row kernels run one block per row; `blockDim.x` is a multiple of 32 of at most 1024.

#include <stdint.h>

// SplitMix64's finaliser, as motionvl_util::rng::mix64.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The sum of `v` over the block, returned to every thread. `shared` holds 32 floats.
__device__ float block_sum(float v, float* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    const float total = shared[0];
    __syncthreads();  // `shared` is free again for the next sum
    return total;
}

// LoRA dropout's keep mask: element i is 0 when the top 24 bits of
// mix64(seed ^ i·0xD1B54A32D192ED03) fall below `threshold` (p·2²⁴), else `keep` (1/(1−p)):
// models/src/lora_adapter.rs draws the same mask on the CPU.
extern "C" __global__ void motionvl_dropout_keep_mask(float* out, uint64_t n, uint64_t seed, uint64_t threshold, float keep) {
    const uint64_t stride = (uint64_t)blockDim.x * gridDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (mix64(seed ^ (i * 0xD1B54A32D192ED03ull)) >> 40) < threshold ? 0.0f : keep;
    }
}

// RMSNorm: y = x·r·w per row of `width`, r = 1/√(mean(x²) + eps).
extern "C" __global__ void motionvl_rms_norm_f32(const float* x, const float* w, float* y, int width, float eps) {
    __shared__ float shared[32];
    const float* row = x + (size_t)blockIdx.x * width;
    float* out = y + (size_t)blockIdx.x * width;
    float squares = 0.0f;
    for (int j = threadIdx.x; j < width; j += blockDim.x) squares += row[j] * row[j];
    const float r = 1.0f / sqrtf(block_sum(squares, shared) / width + eps);
    for (int j = threadIdx.x; j < width; j += blockDim.x) out[j] = row[j] * r * w[j];
}

// RMSNorm's backward, per row: dx = r·dy·w − x·c with c = r³·Σ(dy·w·x)/width; each row's r is
// kept for the weight's gradient.
extern "C" __global__ void motionvl_rms_norm_backward_rows_f32(const float* x, const float* w, const float* dy, float* dx, float* r_rows, int width,
                                                               float eps) {
    __shared__ float shared[32];
    const size_t offset = (size_t)blockIdx.x * width;
    float squares = 0.0f, dot = 0.0f;
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        const float xj = x[offset + j];
        squares += xj * xj;
        dot += dy[offset + j] * w[j] * xj;
    }
    const float r = 1.0f / sqrtf(block_sum(squares, shared) / width + eps);
    const float c = r * r * r * block_sum(dot, shared) / width;
    for (int j = threadIdx.x; j < width; j += blockDim.x) dx[offset + j] = r * dy[offset + j] * w[j] - x[offset + j] * c;
    if (threadIdx.x == 0) r_rows[blockIdx.x] = r;
}

// RMSNorm's weight gradient, Σ_rows dy·x·r, in two passes: block (bx, by) sums column j over the
// rows by, by + gridDim.y, … into partial[by][j]; then `motionvl_sum_columns_f32` adds the
// partials in order (the same result whatever the scheduling).
extern "C" __global__ void motionvl_rms_norm_backward_weight_f32(const float* x, const float* dy, const float* r_rows, float* partial, int rows,
                                                                 int width) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= width) return;
    float acc = 0.0f;
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        const size_t at = (size_t)i * width + j;
        acc += dy[at] * x[at] * r_rows[i];
    }
    partial[(size_t)blockIdx.y * width + j] = acc;
}

// out[j] = Σ_c partial[c][j], c in order.
extern "C" __global__ void motionvl_sum_columns_f32(const float* partial, float* out, int chunks, int width) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= width) return;
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) acc += partial[(size_t)c * width + j];
    out[j] = acc;
}

// SwiGLU: y = g·σ(g)·u, σ as candle's silu computes it (g / (1 + e^(−g))).
extern "C" __global__ void motionvl_swiglu_f32(const float* gate, const float* up, float* y, uint64_t n) {
    const uint64_t stride = (uint64_t)blockDim.x * gridDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// SwiGLU's backward into `[2, n]`: dg = dy·u·σ(g)·(1 + g·(1 − σ(g))), then du = dy·g·σ(g).
extern "C" __global__ void motionvl_swiglu_backward_f32(const float* gate, const float* up, const float* dy, float* out, uint64_t n) {
    const uint64_t stride = (uint64_t)blockDim.x * gridDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = gate[i], u = up[i], d = dy[i];
        const float sigmoid = 1.0f / (1.0f + expf(-g));
        out[i] = d * u * sigmoid * (1.0f + g * (1.0f - sigmoid));
        out[n + i] = d * g * sigmoid;
    }
}

// Rotary embedding in the rotate-half convention over rows of `width = 2·half`: with halves
// x = [x1, x2], y1 = x1·c1 − sign·(x2·sa), y2 = x2·c2 + sign·(x1·sb), where the forward has
// sign = 1, sa = s1, sb = s2 and its transpose (the backward) sign = −1, sa = s2, sb = s1. The
// tables are broadcast to x's shape: row r's outer index (three dimensions, the last fastest)
// times their strides gives where its table row starts.
struct TableRows {
    int dims[3];
    long long cos_stride[3], sin_stride[3];
    long long cos_start, sin_start;
};

extern "C" __global__ void motionvl_rotary_f32(const float* x, const float* cos, const float* sin, float* y, uint64_t rows, int half,
                                               TableRows tables, int transpose) {
    const uint64_t n = rows * half, stride = (uint64_t)blockDim.x * gridDim.x;
    const float sign = transpose ? -1.0f : 1.0f;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t row = i / half;
        const int k = (int)(i % half);
        long long c = tables.cos_start, s = tables.sin_start;
        uint64_t rest = row;
        for (int axis = 2; axis >= 0; --axis) {
            const long long index = (long long)(rest % tables.dims[axis]);
            rest /= tables.dims[axis];
            c += index * tables.cos_stride[axis];
            s += index * tables.sin_stride[axis];
        }
        const float* xr = x + row * 2 * half;
        const float x1 = xr[k], x2 = xr[half + k];
        const float sa = transpose ? sin[s + half + k] : sin[s + k];
        const float sb = transpose ? sin[s + k] : sin[s + half + k];
        float* yr = y + row * 2 * half;
        yr[k] = x1 * cos[c + k] - sign * (x2 * sa);
        yr[half + k] = x2 * cos[c + half + k] + sign * (x1 * sb);
    }
}
