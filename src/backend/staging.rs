//! Host staging for the recorder's snapshots and the replayer's restores: both move every
//! byte of an engine's device memory, through the trait, and share how they get buffers for it.

use super::GpuBackend;

/// Below this many bytes in all, a snapshot or restore runs in turn on the calling thread:
/// threads and staging cost more than they save on a small state (a flight checkpoint between
/// decode steps, a replay loop's restore).
pub const PARALLEL_FROM: u64 = 32 << 20;

/// Page-locked staging only for this much or more: pinning costs milliseconds per buffer,
/// more than a small state takes to copy.
const PIN_FROM: u64 = 256 << 20;

/// The cores there are to spread bulk work over (1 when the system does not say).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Host buffers for bulk copies: page-locked when the backend gives them (a copy to or from
/// them runs at the link's speed), else ordinary memory.
pub struct Staging<'g> {
    gpu: &'g dyn GpuBackend,
    pinned: Vec<*mut u8>,
    plain: Vec<Vec<u8>>,
    size: usize,
}

impl Staging<'_> {
    /// `n` buffers of `size` bytes for moving `total` bytes, page-locked when that is large
    /// enough to pay for the pinning.
    pub fn new(gpu: &dyn GpuBackend, n: usize, size: usize, total: u64) -> Staging<'_> {
        let pin = total >= PIN_FROM;
        let mut s = Staging {
            gpu,
            pinned: Vec::new(),
            plain: Vec::new(),
            size,
        };
        for _ in 0..n {
            match pin.then(|| gpu.alloc_host_pinned(size)) {
                Some(Ok(p)) if !p.is_null() => s.pinned.push(p),
                _ => s.plain.push(vec![0u8; size]),
            }
        }
        s
    }

    /// Each buffer as a slice of its own.
    pub fn slices(&mut self) -> Vec<&mut [u8]> {
        let mut v: Vec<&mut [u8]> = self
            .pinned
            .iter()
            // SAFETY: each pointer is a live page-locked allocation of `size` bytes this value
            // owns until Drop; each is turned into one slice, borrowed from `self`, so no two
            // slices overlap and none outlives the memory.
            .map(|&p| unsafe { std::slice::from_raw_parts_mut(p, self.size) })
            .collect();
        v.extend(self.plain.iter_mut().map(|b| b.as_mut_slice()));
        v
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        for p in self.pinned.drain(..) {
            let _ = self.gpu.free_host_pinned(p, self.size);
        }
    }
}
