//! The kernel `replay` measures what a launch wrote with: one module, CUDA C for the GPU and a
//! CPU twin for the mock, loaded through the trait like any engine's module.
//!
//! A region is cut into chunks. Before the launch, the kernel leaves each chunk's 64-bit hash
//! in a slot of its own; after it, on the same stream, it hashes each chunk again and sets the
//! chunk's bit in a bitmap where the hash changed. Neither pass waits for the host: the bitmaps
//! are read back in batches, so measuring costs two reads of each region per launch and no
//! host sync per launch. A hash that collides hides a change once in 2^64 chunks.

use crate::backend::{
    HostBody, HostCtx, HostFault, KernelDesc, ModuleDesc, ParamAccess, ParamInfo,
};
use std::sync::Arc;

/// The module's name; nothing a trace records is called this.
pub const MODULE: &str = "gputape_writes";
/// The kernel's name.
pub const KERNEL: &str = "gputape_chunk_hash";
/// Threads per block.
pub const BLOCK: u32 = 256;
/// The pass that stores each chunk's hash.
pub const STORE: u32 = 0;
/// The pass that sets the bit of each chunk whose hash changed.
pub const COMPARE: u32 = 1;

/// FNV-1a over 32-bit little-endian words (a tail shorter than a word is zero-padded), the
/// chunk's length mixed in last so a chunk cut short never hashes like a full one.
const SOURCE: &str = r#"
__device__ __forceinline__ unsigned long long gw_mix(unsigned long long h, unsigned int w) {
    return (h ^ (unsigned long long)w) * 0x100000001b3ull;
}
extern "C" __global__ void gputape_chunk_hash(const unsigned char* p, unsigned long long bytes,
                                              unsigned long long chunk, unsigned int mode,
                                              unsigned long long* hashes, unsigned int* bits) {
    unsigned long long chunks = (bytes + chunk - 1ull) / chunk;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += stride) {
        unsigned long long from = c * chunk;
        unsigned long long len = bytes - from < chunk ? bytes - from : chunk;
        const unsigned char* q = p + from;
        unsigned long long h = 0xcbf29ce484222325ull;
        unsigned long long i = 0ull;
        if (((unsigned long long)q & 15ull) == 0ull) {
            for (; i + 16ull <= len; i += 16ull) {
                uint4 v = *(const uint4*)(q + i);
                h = gw_mix(gw_mix(gw_mix(gw_mix(h, v.x), v.y), v.z), v.w);
            }
        }
        for (; i < len; i += 4ull) {
            unsigned int w = 0u;
            for (unsigned long long b = 0ull; b < 4ull && i + b < len; b++) {
                w |= (unsigned int)q[i + b] << (8u * (unsigned int)b);
            }
            h = gw_mix(h, w);
        }
        h = gw_mix(h, (unsigned int)len);
        if (mode == 0u) {
            hashes[c] = h;
        } else if (hashes[c] != h) {
            atomicOr(&bits[c >> 5], 1u << (unsigned int)(c & 31ull));
        }
    }
}
"#;

/// One chunk's hash, as the kernel computes it.
pub fn chunk_hash(bytes: &[u8]) -> u64 {
    let mix = |h: u64, w: u32| (h ^ w as u64).wrapping_mul(0x100000001b3);
    let mut h = 0xcbf29ce484222325u64;
    for w in bytes.chunks(4) {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        h = mix(h, u32::from_le_bytes(word));
    }
    mix(h, bytes.len() as u32)
}

fn twin(c: &mut dyn HostCtx) -> Result<(), HostFault> {
    let (p, bytes, chunk, mode) = (c.ptr(0)?, c.u64(1)?, c.u64(2)?, c.u32(3)?);
    let (hashes, bits) = (c.ptr(4)?, c.ptr(5)?);
    if chunk == 0 {
        return Err(c.bad_args("a chunk of 0 bytes"));
    }
    let len = usize::try_from(bytes).map_err(|_| c.bad_args(format!("{bytes} bytes")))?;
    let region = c.read(p, len)?.to_vec();
    let chunks = region.chunks(chunk as usize).map(chunk_hash);
    if mode == STORE {
        let out: Vec<u8> = chunks.flat_map(u64::to_le_bytes).collect();
        return c.write(hashes, &out);
    }
    let now: Vec<u64> = chunks.collect();
    let old = c.read(hashes, now.len() * 8)?.to_vec();
    let words = now.len().div_ceil(32);
    let mut set = c.read(bits, words * 4)?.to_vec();
    for (i, h) in now.iter().enumerate() {
        let before = u64::from_le_bytes(old[i * 8..i * 8 + 8].try_into().unwrap());
        if before != *h {
            set[(i / 32) * 4 + (i % 32) / 8] |= 1 << (i % 8);
        }
    }
    c.write(bits, &set)
}

/// The module, with its CPU twin.
pub fn module() -> ModuleDesc {
    use ParamAccess::{Read, ReadWrite, Value};
    let body: HostBody = Arc::new(twin);
    ModuleDesc {
        name: MODULE.into(),
        source: Some(SOURCE.into()),
        kernels: vec![KernelDesc::new(
            KERNEL,
            ParamInfo::packed(&[
                (8, Read),
                (8, Value),
                (8, Value),
                (4, Value),
                (8, ReadWrite),
                (8, ReadWrite),
            ]),
            Some(body),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tail chunk hashes apart from the same bytes zero-padded, and a change anywhere in a
    /// chunk changes its hash.
    #[test]
    fn hashes_see_length_and_every_byte() {
        let a = [1u8, 2, 3, 4, 5];
        assert_ne!(chunk_hash(&a), chunk_hash(&[1, 2, 3, 4, 5, 0, 0, 0]));
        for i in 0..a.len() {
            let mut b = a;
            b[i] ^= 0x10;
            assert_ne!(chunk_hash(&a), chunk_hash(&b), "byte {i}");
        }
    }
}
