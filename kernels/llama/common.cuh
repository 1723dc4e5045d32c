// Prepended (after kernels/model/prelude.cuh) to every kernel of the bf16 batched step
// (src/model/llama/kernels.rs). Weights and the KV cache are bf16, held as raw 16-bit words so
// that no CUDA header is needed; activations are f32. Every multiply-add is an explicit fused
// `__fmaf_rn` and the exponential is `gt_exp` below (floor, fma and exponent bits only), so the
// CPU twins, which use `f32::mul_add` and the same polynomial, round exactly as these do.

__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}

// Round to nearest, ties to even; NaN stays a quiet NaN.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// e^x for softmax and SiLU: 2^(x log2 e), the fraction's power from a degree-7 Taylor
// polynomial (relative error below 2e-6), the integer part put into the exponent. The input is
// clamped to [-87, 88] so the result stays a normal float.
__device__ __forceinline__ float gt_exp(float x) {
    // Constants by their bits, so the host's copy (numerics.rs) is the same float exactly.
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    float t = x * __int_as_float(0x3fb8aa3b); // log2 e
    float fi = floorf(t);
    float f = t - fi;
    float p = __int_as_float(0x377fe5fe); // ln2^7 / 7!
    p = __fmaf_rn(p, f, __int_as_float(0x39218489));
    p = __fmaf_rn(p, f, __int_as_float(0x3aaec3ff));
    p = __fmaf_rn(p, f, __int_as_float(0x3c1d955b));
    p = __fmaf_rn(p, f, __int_as_float(0x3d635847));
    p = __fmaf_rn(p, f, __int_as_float(0x3e75fdf0));
    p = __fmaf_rn(p, f, __int_as_float(0x3f317218));
    p = __fmaf_rn(p, f, 1.0f);
    return p * __int_as_float(((int)fi + 127) << 23);
}
