//! The kernels of the flight recorder's device checkpoints: CUDA C for the GPU and CPU twins
//! for the mock, loaded through the trait like any engine's module.
//!
//! A checkpoint must not stop the engine's streams (`device_ckpt/` says why and how it is
//! ordered). `gather` runs with one block per 64 KiB chunk of the buffers written since the
//! last checkpoint: it hashes the chunk where it lies, and only a chunk whose hash differs from
//! the one the table holds (or one the table marks as never taken) is copied into the staging
//! ring, at an offset reserved with one atomic. A KV cache that gained a position per step so
//! costs a few chunks, not the pool. The recorder then copies the staging ring into host
//! memory on its own stream (a copy engine's work, not the SMs': the engine's kernels keep
//! them), and `done`, one thread, writes the checkpoint's number into a host word that the
//! recorder's thread watches: no host call on any stream ever waits for it.
//!
//! The hash is two 64-bit lanes, each a sum over the chunk's 8-byte words of a strong mix of
//! the word and its index: order-independent, so threads add their parts in any order. It
//! only tells a changed chunk from the one taken last time; blobs are named by BLAKE3 on the
//! host as always.

use crate::backend::DevicePtr;
use crate::backend::{
    HostBody, HostCtx, HostFault, KernelDesc, ModuleDesc, ParamAccess, ParamInfo,
};
use std::sync::Arc;

/// The module's name; nothing a trace records is called this.
pub const MODULE: &str = "gputape_checkpoint";
/// The hashing and copying kernel.
pub const GATHER: &str = "gputape_checkpoint_gather";
/// The kernel that says the checkpoint is done.
pub const DONE: &str = "gputape_checkpoint_done";
/// The size of a chunk: the unit a checkpoint hashes and copies.
pub const CHUNK: u64 = 64 << 10;
/// Threads per block of a gather.
pub const BLOCK: u32 = 256;
/// Words per table entry: source address, length, old hash (2), new hash (2), where the
/// chunk went, mode.
pub const ENTRY_WORDS: usize = 8;
/// Mode: copied if its hash differs from the old one.
pub const COMPARE: u64 = 0;
/// Mode: copied whatever its hash (never taken, or changed and not taken since).
pub const FORCE: u64 = 1;
/// Mode: only hashed (a buffer whose bytes are known whole already).
pub const HASH_ONLY: u64 = 2;
/// An entry's `out` when its chunk had not changed.
pub const SAME: u64 = u64::MAX;
/// An entry's `out` when its chunk changed but the ring was full.
pub const FULL: u64 = u64::MAX - 1;
/// Device counters (`ctr`): ring cursor, blocks done, bytes used by the last gather.
pub const CTR_WORDS: usize = 3;
/// Host control words (`ctl`): the number of the last checkpoint done, the one being taken,
/// the ring bytes its chunks asked for.
pub const CTL_WORDS: usize = 4;

const SEED0: u64 = 0x243f_6a88_85a3_08d3;
const SEED1: u64 = 0x1319_8a2e_0370_7344;
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

const SOURCE: &str = r#"
typedef unsigned long long u64;
__device__ __forceinline__ u64 gt_mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ u64 gt_word(const unsigned char* p, u64 k, u64 len) {
    u64 at = k * 8ull;
    if (at + 8ull <= len && (((u64)p) & 7ull) == 0ull) return ((const u64*)p)[k];
    u64 w = 0ull;
    for (u64 b = 0ull; b < 8ull && at + b < len; b++) w |= ((u64)p[at + b]) << (8ull * b);
    return w;
}
__device__ __forceinline__ u64 gt_warp_sum(u64 v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
extern "C" __global__ void gputape_checkpoint_gather(u64* tab, u64 n, unsigned char* ring, u64 cap, u64* ctr) {
    __shared__ u64 s0[32], s1[32];
    __shared__ u64 out;
    u64* e = tab + (u64)blockIdx.x * 8ull;
    const unsigned char* src = (const unsigned char*)e[0];
    u64 len = e[1];
    u64 words = (len + 7ull) / 8ull;
    u64 a0 = 0ull, a1 = 0ull;
    for (u64 k = threadIdx.x; k < words; k += blockDim.x) {
        u64 w = gt_word(src, k, len) ^ (k * 0x9e3779b97f4a7c15ull);
        a0 += gt_mix(w ^ 0x243f6a8885a308d3ull);
        a1 += gt_mix(w ^ 0x13198a2e03707344ull);
    }
    a0 = gt_warp_sum(a0);
    a1 = gt_warp_sum(a1);
    unsigned int warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    if (lane == 0u) { s0[warp] = a0; s1[warp] = a1; }
    __syncthreads();
    if (threadIdx.x == 0u) {
        u64 h0 = gt_mix(len), h1 = gt_mix(len ^ 0x9e3779b97f4a7c15ull);
        for (unsigned int w = 0u; w < (blockDim.x + 31u) / 32u; w++) { h0 += s0[w]; h1 += s1[w]; }
        u64 o = 0xffffffffffffffffull;
        if (e[7] == 1ull || (e[7] == 0ull && (h0 != e[2] || h1 != e[3]))) {
            u64 want = (len + 15ull) & ~15ull;
            u64 at = atomicAdd(&ctr[0], want);
            o = at + want <= cap ? at : 0xfffffffffffffffeull;
        }
        e[4] = h0; e[5] = h1; e[6] = o;
        out = o;
    }
    __syncthreads();
    u64 o = out;
    if (o < 0xfffffffffffffffeull) {
        unsigned char* dst = ring + o;
        if (((((u64)src) | ((u64)dst) | len) & 15ull) == 0ull) {
            const uint4* s = (const uint4*)src;
            uint4* d = (uint4*)dst;
            for (u64 i = threadIdx.x; i < len / 16ull; i += blockDim.x) d[i] = s[i];
        } else {
            for (u64 i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
        }
    }
    __syncthreads();
    if (threadIdx.x == 0u) {
        __threadfence();
        u64 done = atomicAdd(&ctr[1], 1ull);
        if (done == n - 1ull) {
            __threadfence();
            ctr[2] = atomicAdd(&ctr[0], 0ull);
            ctr[0] = 0ull;
            ctr[1] = 0ull;
            __threadfence();
        }
    }
}
extern "C" __global__ void gputape_checkpoint_done(const u64* ctr, u64* ctl) {
    ctl[2] = ctr[2];
    __threadfence_system();
    *((volatile u64*)&ctl[0]) = ctl[1];
    __threadfence_system();
}
"#;

/// The kernel's mix: a 64-bit finaliser (splitmix64's).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A chunk's two hash lanes, as `gather` computes them.
pub fn chunk_hash(bytes: &[u8]) -> [u64; 2] {
    let len = bytes.len() as u64;
    let (mut h0, mut h1) = (mix(len), mix(len ^ GOLDEN));
    for (k, c) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        let w = u64::from_le_bytes(w) ^ (k as u64).wrapping_mul(GOLDEN);
        h0 = h0.wrapping_add(mix(w ^ SEED0));
        h1 = h1.wrapping_add(mix(w ^ SEED1));
    }
    [h0, h1]
}

fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
        .collect()
}

fn put_words(c: &mut dyn HostCtx, at: DevicePtr, v: &[u64]) -> Result<(), HostFault> {
    let b: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
    c.write(at, &b)
}

/// `gather`'s twin: the same table, ring and counters, chunk by chunk in order.
fn gather_twin(c: &mut dyn HostCtx) -> Result<(), HostFault> {
    let (tab, n, ring, cap, ctr) = (c.ptr(0)?, c.u64(1)?, c.ptr(2)?, c.u64(3)?, c.ptr(4)?);
    let mut cursor = words(c.read(ctr, 8)?)[0];
    for i in 0..n {
        let at = tab.offset(i as usize * ENTRY_WORDS * 8);
        let mut e = words(c.read(at, ENTRY_WORDS * 8)?);
        let len = usize::try_from(e[1]).map_err(|_| c.bad_args("chunk length"))?;
        let src = c.read(DevicePtr(e[0]), len)?.to_vec();
        let h = chunk_hash(&src);
        let mut out = SAME;
        if e[7] == FORCE || (e[7] == COMPARE && h != [e[2], e[3]]) {
            let want = (len as u64).next_multiple_of(16);
            out = if cursor + want <= cap { cursor } else { FULL };
            cursor += want;
        }
        if out < FULL {
            c.write(ring.offset(out as usize), &src)?;
        }
        (e[4], e[5], e[6]) = (h[0], h[1], out);
        put_words(c, at, &e)?;
    }
    put_words(c, ctr, &[0, 0, cursor])
}

/// `done`'s twin.
fn done_twin(c: &mut dyn HostCtx) -> Result<(), HostFault> {
    let (ctr, ctl) = (c.ptr(0)?, c.ptr(1)?);
    let used = words(c.read(ctr, CTR_WORDS * 8)?)[2];
    let mut k = words(c.read(ctl, CTL_WORDS * 8)?);
    k[2] = used;
    k[0] = k[1];
    put_words(c, ctl, &k)
}

/// The module, with its CPU twins.
pub fn module() -> ModuleDesc {
    use ParamAccess::{Read, ReadWrite, Value, Write};
    let gather: HostBody = Arc::new(gather_twin);
    let done: HostBody = Arc::new(done_twin);
    ModuleDesc {
        name: MODULE.into(),
        source: Some(SOURCE.into()),
        kernels: vec![
            KernelDesc::new(
                GATHER,
                ParamInfo::packed(&[
                    (8, ReadWrite),
                    (8, Value),
                    (8, Write),
                    (8, Value),
                    (8, ReadWrite),
                ]),
                Some(gather),
            ),
            KernelDesc::new(
                DONE,
                ParamInfo::packed(&[(8, Read), (8, ReadWrite)]),
                Some(done),
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash sees every byte and where it is, and a tail shorter than a word.
    #[test]
    fn hash_tells_changes_apart() {
        let a = vec![7u8; 100];
        let mut b = a.clone();
        assert_eq!(chunk_hash(&a), chunk_hash(&b));
        b[99] = 8;
        assert_ne!(chunk_hash(&a), chunk_hash(&b));
        // Two words swapped: same sum of words, other positions.
        let mut c: Vec<u8> = (0..64u8).collect();
        let d0 = chunk_hash(&c);
        c.swap(0, 8);
        assert_ne!(d0, chunk_hash(&c));
        // Zeros of two lengths differ.
        assert_ne!(chunk_hash(&[0; 16]), chunk_hash(&[0; 24]));
    }
}
