//! The measuring replay: the hash passes around each launch, their batches read back, and the
//! changed bytes split among a launch's pointers (see the module above).

use super::kernel as wk;
use super::{infer, pointers, LaunchWrites, PointerWrites, WriteExtents, WriteOptions, FORMAT};
use crate::backend::{DevicePtr, GpuBackend, KernelArg, KernelHandle};
use crate::replayer::state::{resolve_stream, sync_all, State};
use crate::replayer::{ModuleLoader, Outcome, ReplayError, Replayer};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::Instant;

/// Hash slots on the device (one per chunk of a pending region): 32 MiB, 2 GiB of regions.
const HASH_SLOTS: u64 = 1 << 22;
/// Bitmap words on the device.
const BIT_WORDS: u64 = HASH_SLOTS / 32 + 4096;
/// Bytes kept at each pointer before and after the launch: the changes among them are known to
/// the byte (a small tensor's extent is exact, not its chunk), and what was written there is
/// what its type is inferred from.
const SAMPLE: u64 = 4096;
/// Samples on the device per batch.
const SAMPLE_SLOTS: u64 = 1024;
/// Regions pending before a batch is read back.
const MAX_PENDING: usize = 1024;

/// A region pending on the device: the part of one allocation a launch's pointers reach.
struct Pending {
    seq: u64,
    buf: BufferId,
    /// Where the hashed region starts in `buf` (its first pointer's chunk) and ends (the
    /// allocation's end, or `WriteOptions::reach` past its last pointer).
    start: u64,
    size: u64,
    chunks: u64,
    /// Its first hash slot, and its first word in the bitmap.
    slot: u64,
    word: u64,
    /// The launch's pointers into `buf`.
    ptrs: Vec<Ptr>,
}

/// One pointer of a pending region, with the sample slots of the bytes at it before and after
/// the launch.
#[derive(Clone, Copy)]
struct Ptr {
    param: usize,
    inner: Option<usize>,
    off: u64,
    /// Bytes sampled at the pointer (up to `SAMPLE`, to the buffer's end).
    len: u64,
    before: u64,
    after: u64,
}

/// The device side: the hash kernel, its hash slots, bitmap and samples.
struct Hasher {
    handle: KernelHandle,
    hashes: DevicePtr,
    bits: DevicePtr,
    samples: DevicePtr,
    hash_used: u64,
    bit_used: u64,
    sample_used: u64,
    sm: u32,
    chunk: u64,
    /// `WriteOptions::reach`.
    reach: u64,
    pending: Vec<Pending>,
}

impl Hasher {
    fn new(gpu: &dyn GpuBackend, opts: &WriteOptions) -> anyhow::Result<Hasher> {
        gpu.load_module(&wk::module())?;
        let handle = gpu.kernel(wk::MODULE, wk::KERNEL)?;
        let hashes = gpu.alloc((HASH_SLOTS * 8) as usize)?;
        let bits = gpu.alloc((BIT_WORDS * 4) as usize)?;
        let samples = gpu.alloc((SAMPLE_SLOTS * SAMPLE) as usize)?;
        gpu.memset(bits, 0, (BIT_WORDS * 4) as usize)?;
        Ok(Hasher {
            handle,
            hashes,
            bits,
            samples,
            hash_used: 0,
            bit_used: 0,
            sample_used: 0,
            sm: gpu.sm_count().unwrap_or(1).max(1),
            chunk: opts.chunk,
            reach: opts.reach.max(opts.chunk),
            pending: Vec::new(),
        })
    }

    fn release(self, gpu: &dyn GpuBackend) {
        for p in [self.hashes, self.bits, self.samples] {
            if let Err(e) = gpu.free(p) {
                tracing::warn!("write extents: freeing a buffer of its own: {e:#}");
            }
        }
    }

    /// Whether `chunks` more hash slots, their bitmap and `samples` more samples fit the batch.
    fn fits(&self, chunks: u64, samples: u64) -> bool {
        self.hash_used + chunks <= HASH_SLOTS
            && self.bit_used + chunks.div_ceil(32) <= BIT_WORDS
            && self.sample_used + samples <= SAMPLE_SLOTS
    }

    /// Enqueue one pass over `bytes` at `p` on `stream`, its hashes at slot `slot`.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        gpu: &dyn GpuBackend,
        p: DevicePtr,
        bytes: u64,
        mode: u32,
        slot: u64,
        word: u64,
        stream: u64,
    ) -> anyhow::Result<()> {
        let chunks = bytes.div_ceil(self.chunk);
        let grid = chunks
            .div_ceil(wk::BLOCK as u64)
            .min(self.sm as u64 * 8)
            .max(1) as u32;
        let (b, c, m) = (
            bytes.to_le_bytes(),
            self.chunk.to_le_bytes(),
            mode.to_le_bytes(),
        );
        gpu.launch_typed(
            self.handle,
            [grid, 1, 1],
            [wk::BLOCK, 1, 1],
            0,
            stream,
            &[
                KernelArg::Buffer(p),
                KernelArg::Bytes(&b),
                KernelArg::Bytes(&c),
                KernelArg::Bytes(&m),
                KernelArg::Buffer(self.hashes.offset((slot * 8) as usize)),
                KernelArg::Buffer(self.bits.offset((word * 4) as usize)),
            ],
        )
    }

    /// One side of a launch for region `r` of the buffer at `base`: the hash pass (`mode`), then
    /// the bytes at each of its pointers kept; their sample slots, in pointer order.
    fn around(
        &mut self,
        gpu: &dyn GpuBackend,
        base: DevicePtr,
        r: &Pending,
        mode: u32,
        stream: u64,
    ) -> anyhow::Result<Vec<u64>> {
        let region = base.offset(r.start as usize);
        self.pass(gpu, region, r.size - r.start, mode, r.slot, r.word, stream)?;
        r.ptrs
            .iter()
            .map(|p| self.sample(gpu, base.offset(p.off as usize), p.len, stream))
            .collect()
    }

    /// Copy `len` bytes at `p` into the next sample slot, on `stream`; the slot.
    fn sample(
        &mut self,
        gpu: &dyn GpuBackend,
        p: DevicePtr,
        len: u64,
        stream: u64,
    ) -> anyhow::Result<u64> {
        let at = self.sample_used;
        gpu.copy_d2d_async(
            p,
            self.samples.offset((at * SAMPLE) as usize),
            len as usize,
            stream,
        )?;
        self.sample_used += 1;
        Ok(at)
    }

    /// Wait for every stream and turn the batch's bitmaps and samples into writes.
    fn flush(&mut self, gpu: &dyn GpuBackend, st: &State, out: &mut Collect) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        sync_all(gpu, st)?;
        let mut bits = vec![0u8; (self.bit_used * 4) as usize];
        gpu.copy_d2h(self.bits, &mut bits)?;
        let mut samples = vec![0u8; (self.sample_used * SAMPLE) as usize];
        if !samples.is_empty() {
            gpu.copy_d2h(self.samples, &mut samples)?;
        }
        for p in std::mem::take(&mut self.pending) {
            let words =
                &bits[(p.word * 4) as usize..((p.word + p.chunks.div_ceil(32)) * 4) as usize];
            let changed = changed_ranges(words, p.chunks, p.start, self.chunk, p.size);
            out.add(&p, &changed, &samples);
        }
        gpu.memset(self.bits, 0, (self.bit_used * 4) as usize)?;
        self.hash_used = 0;
        self.bit_used = 0;
        self.sample_used = 0;
        Ok(())
    }
}

/// The byte ranges whose chunk's bit is set, merged, clipped to the buffer's `size`.
fn changed_ranges(words: &[u8], chunks: u64, start: u64, chunk: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for c in 0..chunks {
        let (w, b) = ((c / 32) as usize, c % 32);
        let word = u32::from_le_bytes(words[w * 4..w * 4 + 4].try_into().unwrap());
        if word & (1 << b) == 0 {
            continue;
        }
        let (a, z) = (start + c * chunk, (start + (c + 1) * chunk).min(size));
        match out.last_mut() {
            Some(last) if last.1 == a => last.1 = z,
            _ => out.push((a, z)),
        }
    }
    out
}

/// Split changed byte ranges among pointers into the same buffer: a byte belongs to the
/// pointer at the highest offset at or before it; bytes before every pointer (the first
/// chunk's part before it) belong to none. Pointers at the same offset share their bytes.
fn split(changed: &[(u64, u64)], offsets: &[u64]) -> HashMap<u64, Vec<(u64, u64)>> {
    let mut sorted: Vec<u64> = offsets.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: HashMap<u64, Vec<(u64, u64)>> = HashMap::default();
    for &(a, z) in changed {
        for (i, &off) in sorted.iter().enumerate() {
            let next = sorted.get(i + 1).copied().unwrap_or(u64::MAX);
            let (s, e) = (a.max(off), z.min(next));
            if s < e {
                out.entry(off).or_default().push((s, e));
            }
        }
    }
    out
}

/// The byte ranges where `before` and `after` (sampled at offset `off`) differ, aligned to 8
/// bytes from the pointer (a value's bytes that happen to be unchanged do not split it), gaps
/// under 64 bytes closed; the first starts at the pointer, where the tensor does.
fn exact(before: &[u8], after: &[u8], off: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (i, (x, y)) in before.iter().zip(after).enumerate() {
        if x == y {
            continue;
        }
        let (a, z) = (i as u64 / 8 * 8, (i as u64 / 8 + 1) * 8);
        match out.last_mut() {
            Some(last) if a <= last.1 + 64 => last.1 = last.1.max(z),
            _ => out.push((a, z)),
        }
    }
    if let Some(first) = out.first_mut() {
        first.0 = 0;
    }
    let len = before.len().min(after.len()) as u64;
    out.into_iter()
        .map(|(a, z)| (off + a, off + z.min(len)))
        .collect()
}

/// Merge `more` into sorted, disjoint `ranges`.
fn merge(ranges: &mut Vec<(u64, u64)>, more: &[(u64, u64)]) {
    ranges.extend_from_slice(more);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(a, z) in ranges.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(z),
            _ => out.push((a, z)),
        }
    }
    *ranges = out;
}

/// The measurements as they come back, by seq. Every pointer of every launch is measured:
/// a parameter that wrote nothing in earlier launches may write now (a benchmark loop writes
/// the same values again and again, then the real call writes a NaN).
#[derive(Default)]
struct Collect {
    launches: HashMap<u64, LaunchWrites>,
}

impl Collect {
    fn add(&mut self, p: &Pending, changed: &[(u64, u64)], samples: &[u8]) {
        let offsets: Vec<u64> = p.ptrs.iter().map(|x| x.off).collect();
        let mut by_off = split(changed, &offsets);
        let l = self.launches.entry(p.seq).or_insert_with(|| LaunchWrites {
            seq: p.seq,
            kernel: String::new(),
            pointers: Vec::new(),
        });
        for ptr in &p.ptrs {
            let (param, inner, off) = (ptr.param, ptr.inner, ptr.off);
            let sample = |slot: u64| {
                let at = (slot * SAMPLE) as usize;
                samples.get(at..at + ptr.len as usize)
            };
            let (before, after) = (sample(ptr.before), sample(ptr.after));
            let mut ranges = by_off.get(&off).cloned().unwrap_or_default();
            // Changes that all lie in the bytes sampled at the pointer are known exactly.
            if let (Some(b), Some(a), Some(last)) = (before, after, ranges.last()) {
                if last.1 <= off + ptr.len {
                    ranges = exact(b, a, off);
                }
            }
            // The sample is the first bytes at the pointer; only what was written counts.
            let inferred = after.and_then(|a| {
                let (s, e) = *ranges.first()?;
                (s == off).then_some(())?;
                infer(a.get(..(e - s).min(ptr.len) as usize)?)
            });
            match l
                .pointers
                .iter_mut()
                .find(|x| x.param == param && x.inner == inner && x.buf == p.buf && x.off == off)
            {
                Some(x) => {
                    merge(&mut x.ranges, &ranges);
                    x.inferred = x.inferred.or(inferred);
                }
                None => l.pointers.push(PointerWrites {
                    param,
                    inner,
                    buf: p.buf,
                    off,
                    ranges,
                    inferred,
                }),
            }
        }
        by_off.clear();
    }
}

impl Replayer<'_> {
    /// Replay the trace on `gpu`, measuring what every launch wrote (see the module docs).
    /// `key` is the trace's blake3 (`trace_key`), kept with the result.
    pub fn measure_writes(
        &self,
        gpu: &dyn GpuBackend,
        opts: &WriteOptions,
        key: String,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<WriteExtents, ReplayError> {
        let t0 = Instant::now();
        if opts.chunk < 4 || !opts.chunk.is_power_of_two() {
            return Err(ReplayError::Setup {
                what: "measuring writes".into(),
                cause: format!(
                    "a chunk of {} bytes: it must be a power of two, at least 4",
                    opts.chunk
                ),
            });
        }
        let mut guard = self.set_up(gpu, loader)?;
        let mut hasher = Hasher::new(gpu, opts).map_err(|e| ReplayError::Setup {
            what: "loading the write-extent hash kernel".into(),
            cause: format!("{e:#}"),
        })?;
        let mut out = WriteExtents {
            format: FORMAT,
            trace: key,
            chunk: opts.chunk,
            reach: opts.reach.max(opts.chunk),
            ..Default::default()
        };
        let mut got = Collect::default();
        let st = &mut guard.st;
        let mut unmeasured: HashSet<String> = HashSet::default();
        for (c, graph) in self.eager_calls() {
            let step =
                self.measure_one(gpu, st, &mut hasher, &mut got, c, &mut out, &mut unmeasured);
            if let Err(e) = step {
                out.stopped = Some(e);
                break;
            }
            if graph.is_some() && c.call.launch().is_some() {
                if let Err(e) = sync_all(gpu, st) {
                    out.stopped = Some(format!("graph node #{}: {e:#}", c.seq));
                    break;
                }
            }
        }
        if let Err(e) = hasher.flush(gpu, st, &mut got) {
            out.stopped
                .get_or_insert(format!("reading the measurements back: {e:#}"));
        }
        hasher.release(gpu);
        drop(guard);
        for (seq, mut l) in got.launches {
            l.kernel = self
                .by_seq
                .get(&seq)
                .and_then(|c| c.call.launch())
                .map(|(k, _)| self.trace.kernel_name(k))
                .unwrap_or_default();
            l.pointers.sort_by_key(|p| (p.param, p.inner));
            out.launches.push(l);
        }
        out.unmeasured = unmeasured.into_iter().collect();
        out.unmeasured.sort();
        out.index();
        out.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(out)
    }

    /// Issue one call, with a launch's hashes around it; an error that stops the measurement.
    #[allow(clippy::too_many_arguments)]
    fn measure_one(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        hasher: &mut Hasher,
        got: &mut Collect,
        c: &CallRecord,
        out: &mut WriteExtents,
        unmeasured: &mut HashSet<String>,
    ) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| {
            format!("call #{} at {}: {e}", c.seq, self.trace.site(c.site))
        };
        let launch = c.call.launch().filter(|(k, _)| !st.opaque.contains(k));
        if let Some((k, _)) = c.call.launch().filter(|(k, _)| st.opaque.contains(k)) {
            unmeasured.insert(format!(
                "{}: this backend cannot run it",
                self.trace.kernel_name(k)
            ));
        }
        let mut regions: Vec<Pending> = Vec::new();
        let mut stream = 0;
        if let Some((kernel, args)) = launch {
            out.replayed += 1;
            if let Some(s) = c.call.work_stream() {
                stream = resolve_stream(st, s, c).map_err(|e| fail(&e))?;
            }
            let mut ptrs: Vec<(BufferId, u64, Ptr)> = Vec::new();
            for (param, inner, buf, off) in pointers(args) {
                let Some((_, size)) = st.bufs.get(&buf).copied() else {
                    continue;
                };
                if off < size {
                    let len = SAMPLE.min(size - off);
                    let ptr = Ptr {
                        param,
                        inner,
                        off,
                        len,
                        before: 0,
                        after: 0,
                    };
                    ptrs.push((buf, size, ptr));
                }
            }
            // By buffer, then offset: a region per run of pointers no further apart than the
            // reach, ending that far past its last pointer (or at the buffer's end).
            ptrs.sort_by_key(|(buf, _, p)| (*buf, p.off));
            for (buf, size, p) in ptrs {
                match regions.last_mut() {
                    Some(r) if r.buf == buf && p.off <= r.size => r.ptrs.push(p),
                    _ => regions.push(Pending {
                        seq: c.seq,
                        buf,
                        start: p.off / hasher.chunk * hasher.chunk,
                        size,
                        chunks: 0,
                        slot: 0,
                        word: 0,
                        ptrs: vec![p],
                    }),
                }
                let r = regions.last_mut().expect("just pushed or extended");
                let reach = p.off.saturating_add(hasher.reach).min(size);
                r.size = match r.ptrs.len() {
                    1 => reach,
                    _ => r.size.max(reach),
                };
            }
            for r in &regions {
                if st.bufs.get(&r.buf).is_some_and(|(_, size)| r.size < *size) {
                    out.bounded += 1;
                }
            }
            for r in regions.iter_mut() {
                r.chunks = (r.size - r.start).div_ceil(hasher.chunk);
            }
            let chunks: u64 = regions.iter().map(|r| r.chunks).sum();
            let samples: u64 = 2 * regions.iter().map(|r| r.ptrs.len() as u64).sum::<u64>();
            if !hasher.fits(chunks, samples) || hasher.pending.len() + regions.len() > MAX_PENDING {
                hasher
                    .flush(gpu, st, got)
                    .map_err(|e| fail(&format!("{e:#}")))?;
            }
            if !hasher.fits(chunks, samples) {
                unmeasured.insert(format!(
                    "#{} {}: its regions ({} chunks) exceed what one batch holds",
                    c.seq,
                    self.trace.kernel_name(kernel),
                    chunks
                ));
                regions.clear();
            }
            for r in regions.iter_mut() {
                let (base, _) = st.bufs[&r.buf];
                r.word = hasher.bit_used;
                r.slot = hasher.hash_used;
                hasher.hash_used += r.chunks;
                hasher.bit_used += r.chunks.div_ceil(32);
                out.bytes_hashed += 2 * (r.size - r.start);
                let slots = hasher
                    .around(gpu, base, r, wk::STORE, stream)
                    .map_err(|e| fail(&format!("before it: {e:#}")))?;
                for (p, slot) in r.ptrs.iter_mut().zip(slots) {
                    p.before = slot;
                }
            }
        }
        if let Some(e) = self.issue_checked(gpu, st, c)? {
            return Err(fail(&e));
        }
        for mut r in regions {
            let (base, _) = st.bufs[&r.buf];
            let slots = hasher
                .around(gpu, base, &r, wk::COMPARE, stream)
                .map_err(|e| fail(&format!("after it: {e:#}")))?;
            for (p, slot) in r.ptrs.iter_mut().zip(slots) {
                p.after = slot;
            }
            hasher.pending.push(r);
        }
        Ok(())
    }

    /// Issue `c`; the error that stops the measurement, if it failed where the recording did
    /// not.
    fn issue_checked(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        c: &CallRecord,
    ) -> Result<Option<String>, String> {
        match self.issue(gpu, st, c, false) {
            Err(e) => Err(format!(
                "call #{} at {}: {e}",
                c.seq,
                self.trace.site(c.site)
            )),
            Ok(Outcome::Failed(e)) if !matches!(c.ret, Some(Err(_))) => Ok(Some(format!("{e:#}"))),
            Ok(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_chunks_become_ranges_clipped_to_the_buffer() {
        // Chunks 0, 1 and 3 of 4 changed; 16-byte chunks from offset 32 of a 90-byte buffer.
        let words = 0b1011u32.to_le_bytes();
        assert_eq!(
            changed_ranges(&words, 4, 32, 16, 90),
            vec![(32, 64), (80, 90)]
        );
    }

    #[test]
    fn changes_split_at_the_pointers_and_bytes_before_them_are_nobody_s() {
        let got = split(&[(0, 100), (200, 300)], &[10, 50, 50, 250]);
        assert_eq!(got[&10], vec![(10, 50)]);
        assert_eq!(got[&50], vec![(50, 100), (200, 250)]);
        assert_eq!(got[&250], vec![(250, 300)]);
        assert_eq!(got.len(), 3);
    }
}
