//! The device side of a check: the scan kernel's launches, their result slots, and reading
//! them back in batches.

use super::kernel as fk;
use super::SLOTS;
use crate::backend::{DevicePtr, ElemType, GpuBackend, KernelArg, KernelHandle};
use crate::replayer::state::{sync_all, State};

/// Per-class first index and count of one scan.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    pub(super) first: [u64; fk::CLASSES],
    pub(super) count: [u64; fk::CLASSES],
}

impl Counts {
    /// The first bad class and its first index, NaN always, Inf when asked.
    pub(super) fn bad(&self, inf: bool) -> Option<(usize, u64)> {
        (0..fk::CLASSES)
            .filter(|c| *c == 0 || inf)
            .filter(|c| self.count[*c] > 0)
            .min_by_key(|c| self.first[*c])
            .map(|c| (c, self.first[c]))
    }
}

/// The device side of a check: the scan kernel and its results buffer.
pub(super) struct Scanner {
    pub(super) handle: KernelHandle,
    pub(super) results: DevicePtr,
    pub(super) used: usize,
    pub(super) sm: u32,
    /// Results of every scan so far, by slot number across batches.
    pub(super) done: Vec<Counts>,
}

impl Scanner {
    pub(super) fn new(gpu: &dyn GpuBackend) -> anyhow::Result<Scanner> {
        gpu.load_module(&fk::module())?;
        let handle = gpu.kernel(fk::MODULE, fk::KERNEL)?;
        let results = gpu.alloc(SLOTS * fk::CLASSES * 16)?;
        let s = Scanner {
            handle,
            results,
            used: 0,
            sm: gpu.sm_count().unwrap_or(1).max(1),
            done: Vec::new(),
        };
        s.reset(gpu)?;
        Ok(s)
    }

    pub(super) fn reset(&self, gpu: &dyn GpuBackend) -> anyhow::Result<()> {
        let half = SLOTS * fk::CLASSES * 8;
        gpu.memset(self.results, 0xff, half)?;
        gpu.memset(self.results.offset(half), 0, half)
    }

    /// Enqueue a scan of `n` elements at `p` on `stream`; its slot number.
    pub(super) fn scan(
        &mut self,
        gpu: &dyn GpuBackend,
        st: &State,
        p: DevicePtr,
        n: u64,
        elem: ElemType,
        stream: u64,
    ) -> anyhow::Result<usize> {
        if self.used == SLOTS {
            self.flush(gpu, st)?;
        }
        let (firsts, counts) = fk::slot_ptrs(self.results, SLOTS, self.used);
        let words = (n * elem.size()).div_ceil(16).max(1);
        let grid = words.div_ceil(fk::BLOCK as u64).min(self.sm as u64 * 8) as u32;
        let (nb, eb) = (n.to_le_bytes(), fk::elem_code(elem).to_le_bytes());
        gpu.launch_typed(
            self.handle,
            [grid.max(1), 1, 1],
            [fk::BLOCK, 1, 1],
            0,
            stream,
            &[
                KernelArg::Buffer(p),
                KernelArg::Bytes(&nb),
                KernelArg::Bytes(&eb),
                KernelArg::Buffer(firsts),
                KernelArg::Buffer(counts),
            ],
        )?;
        self.used += 1;
        Ok(self.done.len() + self.used - 1)
    }

    /// Give the results buffer back (the replay's own buffers go with its state).
    pub(super) fn release(self, gpu: &dyn GpuBackend) -> anyhow::Result<()> {
        gpu.free(self.results)
    }

    /// Wait for every stream, read the batch's results back, start a new batch.
    pub(super) fn flush(&mut self, gpu: &dyn GpuBackend, st: &State) -> anyhow::Result<()> {
        if self.used == 0 {
            return Ok(());
        }
        sync_all(gpu, st)?;
        let mut bytes = vec![0u8; SLOTS * fk::CLASSES * 16];
        gpu.copy_d2h(self.results, &mut bytes)?;
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        for s in 0..self.used {
            let mut c = Counts::default();
            for k in 0..fk::CLASSES {
                c.first[k] = word(s * fk::CLASSES + k);
                c.count[k] = word(SLOTS * fk::CLASSES + s * fk::CLASSES + k);
            }
            self.done.push(c);
        }
        self.used = 0;
        self.reset(gpu)
    }
}
