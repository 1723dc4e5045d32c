//! Reading device memory into a trace, at the scale of an engine's weights: every buffer in
//! parts of `CHUNK_BYTES`, copied through a few pinned staging buffers, hashed, compressed
//! where it pays and encoded by worker threads, and written in order by the caller. Host
//! memory stays at a few parts whatever the buffers hold, and a kill loses at most the part
//! being written.

use super::state::RecState;
use super::RecordError;
use crate::backend::{cores, DevicePtr, GpuBackend, Staging, PARALLEL_FROM};
use crate::trace::{codec, store_put, BlobId, BufferId, CHUNK_BYTES, STORE_MIN};
use std::collections::BTreeMap;
use std::sync::mpsc;

/// One buffer to read: its id, where it is, how big.
pub(super) struct Job {
    pub buf: BufferId,
    pub addr: u64,
    pub size: u64,
}

/// Compress a part only when a sample of it shrinks at least this much (per thousand):
/// measured (benches/scale.rs), bf16 weights shrink to 0.74 and f32 activations to 0.67 at
/// 200-400 MB/s a core, which costs more time than it saves, while a quarter-filled KV cache
/// shrinks to 0.19 and zeros to nothing at 1-2 GB/s.
const PAYS_PER_MILLE: usize = 500;
const SAMPLE: usize = 64 << 10;

/// Whether compressing `bytes` pays, from a sample; and if so, the compressed bytes (kept
/// only if they are smaller than nine tenths of the original).
pub fn compressed_if_it_pays(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < 4096 {
        return None;
    }
    if bytes.len() > SAMPLE * 4 {
        // Four samples spread over the part: a KV cache filled to a quarter is mostly zeros
        // its first bytes do not show.
        let step = bytes.len() / 4;
        let packed: usize = (0..4)
            .map(|k| {
                let s = &bytes[k * step..k * step + SAMPLE];
                zstd::bulk::compress(s, 1).map_or(SAMPLE, |z| z.len())
            })
            .sum();
        if packed * 1000 > SAMPLE * 4 * PAYS_PER_MILLE {
            return None;
        }
    }
    zstd::bulk::compress(bytes, 1)
        .ok()
        .filter(|c| c.len() < bytes.len() / 10 * 9)
}

/// A part, encoded by a worker: its id, its `Blob` record and the record's checksum, and the
/// staging buffer it was read from, to be refilled.
struct Done<'a> {
    idx: usize,
    id: BlobId,
    record: Vec<u8>,
    crc: u32,
    /// Put into the shared store by the worker: how that went.
    stored: Option<Result<(), crate::trace::TraceError>>,
    staging: &'a mut [u8],
}

/// Every job's buffer read and stored one after another, through one reused buffer.
fn read_in_turn(
    gpu: &dyn GpuBackend,
    st: &mut RecState,
    jobs: &[Job],
) -> Result<Vec<BlobId>, RecordError> {
    let mut bytes = Vec::new();
    jobs.iter()
        .map(|job| {
            bytes.clear();
            bytes.resize(job.size as usize, 0);
            gpu.copy_d2h(DevicePtr(job.addr), &mut bytes)
                .map_err(|source| RecordError::Snapshot {
                    buf: job.buf,
                    bytes: job.size,
                    source,
                })?;
            Ok(st.blob(&bytes))
        })
        .collect()
}

/// How many workers hash and encode: the machine's cores less the caller's, up to 15. Into a
/// blob store they also write, each its own file, and the kernel's page-cache work that costs
/// spreads over them (runs 45 and 46, the H200 host's 16 cores: 3.3 GB/s with 8 workers, 4.1
/// with 15).
fn workers() -> usize {
    cores().clamp(2, 16) - 1
}

/// Read every job's buffer into the recording, returning each buffer's blob id (a single
/// part's, or its chunked blob's) in job order.
pub(super) fn read_buffers(
    gpu: &dyn GpuBackend,
    st: &mut RecState,
    jobs: &[Job],
) -> Result<Vec<BlobId>, RecordError> {
    // Every part, in order: (job index, offset, length).
    let parts: Vec<(usize, u64, usize)> = jobs
        .iter()
        .enumerate()
        .flat_map(|(j, job)| {
            let n = job.size.div_ceil(CHUNK_BYTES as u64).max(1);
            (0..n).map(move |k| {
                let off = k * CHUNK_BYTES as u64;
                (j, off, (job.size - off).min(CHUNK_BYTES as u64) as usize)
            })
        })
        .collect();
    let total: u64 = jobs.iter().map(|j| j.size).sum();
    if total < PARALLEL_FROM {
        return read_in_turn(gpu, st, jobs);
    }
    let nworkers = workers().min(parts.len()).max(1);
    let biggest = parts.iter().map(|p| p.2).max().unwrap_or(0).max(1);
    let mut staging = Staging::new(gpu, nworkers + 2, biggest, total);
    let mut free: Vec<&mut [u8]> = staging.slices();
    let mut ids: Vec<Vec<BlobId>> = jobs.iter().map(|_| Vec::new()).collect();
    // Record buffers the workers encode into, handed back after each write.
    let (give_back, reuse) = mpsc::channel::<Vec<u8>>();
    let reuse = std::sync::Mutex::new(reuse);
    let (to_work, work) = mpsc::sync_channel::<(usize, &mut [u8], usize)>(free.len());
    let work = std::sync::Mutex::new(work);
    let (to_main, done) = mpsc::channel::<Done<'_>>();
    // Store files are independent of each other and of the trace, so workers write them in
    // parallel; only the trace's own frames go in order through the caller.
    let store = st.store_for_workers();
    let result = std::thread::scope(|s| -> Result<(), RecordError> {
        for _ in 0..nworkers {
            let (work, reuse, to_main) = (&work, &reuse, to_main.clone());
            let store = store.as_deref();
            s.spawn(move || loop {
                let next = work.lock().expect("no worker panics").recv();
                let Ok((idx, staging, len)) = next else {
                    return;
                };
                let bytes = &staging[..len];
                let id = BlobId::of(bytes);
                let mut out = reuse
                    .lock()
                    .expect("no worker panics")
                    .try_recv()
                    .unwrap_or_default();
                out.clear();
                match compressed_if_it_pays(bytes) {
                    Some(z) => codec::append_blob(id, len as u64, true, &z, &mut out),
                    None => codec::append_blob(id, len as u64, false, bytes, &mut out),
                }
                let crc = crate::trace::crc::crc32c(&out);
                let stored = store
                    .filter(|_| len >= STORE_MIN)
                    .map(|dir| store_put(dir, id, &out, crc));
                let d = Done {
                    idx,
                    id,
                    record: out,
                    crc,
                    stored,
                    staging,
                };
                if to_main.send(d).is_err() {
                    return;
                }
            });
        }
        drop(to_main);
        let mut ready: BTreeMap<usize, Done<'_>> = BTreeMap::new();
        let mut next_emit = 0usize;
        let mut sent = 0usize;
        let mut failed: Option<RecordError> = None;
        while next_emit < parts.len() {
            // Keep the workers fed while there are staging buffers and parts to read.
            while sent < parts.len() && !free.is_empty() && failed.is_none() {
                let (j, off, len) = parts[sent];
                let buf = free.pop().expect("checked");
                let job = &jobs[j];
                if let Err(source) = gpu.copy_d2h(DevicePtr(job.addr + off), &mut buf[..len]) {
                    failed = Some(RecordError::Snapshot {
                        buf: job.buf,
                        bytes: job.size,
                        source,
                    });
                    free.push(buf);
                    break;
                }
                if to_work.send((sent, buf, len)).is_err() {
                    break;
                }
                sent += 1;
            }
            if failed.is_some() && next_emit == sent {
                break;
            }
            let Ok(d) = done.recv() else { break };
            ready.insert(d.idx, d);
            // Write every part that is next in order; its staging buffer is free again.
            while let Some(d) = ready.remove(&next_emit) {
                let back = match d.stored {
                    Some(put) => st.blob_stored(d.id, d.record, put),
                    None => st.blob_encoded(d.id, d.record, d.crc),
                };
                if let Some(back) = back {
                    let _ = give_back.send(back);
                }
                ids[parts[d.idx].0].push(d.id);
                free.push(d.staging);
                next_emit += 1;
            }
        }
        drop(to_work);
        match (failed, parts.get(next_emit)) {
            (Some(e), _) => Err(e),
            (None, Some(&(j, _, _))) => Err(RecordError::Snapshot {
                buf: jobs[j].buf,
                bytes: jobs[j].size,
                source: anyhow::anyhow!("the snapshot's worker threads stopped early"),
            }),
            (None, None) => Ok(()),
        }
    });
    result?;

    Ok(jobs
        .iter()
        .zip(ids)
        .map(|(job, parts)| match parts.as_slice() {
            [one] => *one,
            _ => st.chunked(job.size, parts),
        })
        .collect())
}
