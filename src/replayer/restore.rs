//! Putting a trace's initial state on the device at the scale of an engine's weights: every
//! buffer part by part, read from the trace file (checksum, hash, unpacking) by several
//! threads into page-locked staging buffers, and uploaded from there as each arrives, so
//! reading, checking and the copies overlap and host memory stays at a few parts.

use super::ReplayError;
use crate::backend::{cores, DevicePtr, GpuBackend, Staging, PARALLEL_FROM};
use crate::trace::{BlobId, BlobStore, BufferId, Part, CHUNK_BYTES};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// One buffer to fill: where it is on the replay's device and the blob it starts as.
pub(super) struct Fill {
    pub buf: BufferId,
    pub dst: DevicePtr,
    pub data: BlobId,
}

/// A part read by a reader thread, with the staging buffer it may lie in.
struct Loaded<'s, 'b> {
    at: usize,
    part: Result<Part<'s>, crate::trace::TraceError>,
    staging: &'b mut [u8],
}

/// Fill every buffer with its blob. `sizes[i]` is fill `i`'s buffer size, which its blob must
/// not exceed.
pub(super) fn fill(
    gpu: &dyn GpuBackend,
    blobs: &BlobStore,
    fills: &[Fill],
    sizes: &[u64],
) -> Result<(), ReplayError> {
    // Every part, in order: (fill, part blob, offset).
    let mut parts: Vec<(usize, BlobId, u64)> = Vec::new();
    for (i, f) in fills.iter().enumerate() {
        let len = blobs
            .len_of(&f.data)
            .ok_or(ReplayError::MissingBlob(f.data))?;
        if len > sizes[i] {
            return Err(ReplayError::InitialTooBig {
                buf: f.buf,
                have: len,
                bytes: sizes[i],
            });
        }
        let layout = blobs
            .layout(&f.data)?
            .ok_or(ReplayError::MissingBlob(f.data))?;
        parts.extend(layout.into_iter().map(|(p, off)| (i, p, off)));
    }
    if parts.is_empty() {
        return Ok(());
    }
    let total: u64 = fills.iter().filter_map(|f| blobs.len_of(&f.data)).sum();
    if total < PARALLEL_FROM {
        // A small state: in turn, on this thread (threads cost more than they save here,
        // and a replay loop restores every loop).
        for &(i, part, off) in &parts {
            let f = &fills[i];
            let bytes = blobs.get(&part)?.ok_or(ReplayError::MissingBlob(part))?;
            gpu.copy_h2d(bytes, f.dst.offset(off as usize))
                .map_err(|e| ReplayError::Setup {
                    what: format!("restoring {}", f.buf),
                    cause: format!("{e:#}"),
                })?;
        }
        return Ok(());
    }
    let readers = cores().clamp(1, 8).min(parts.len());
    // Room for the largest part's whole record (its data and a few bytes of head).
    let room = parts
        .iter()
        .filter_map(|(_, p, _)| blobs.len_of(p))
        .max()
        .unwrap_or(0)
        .min(CHUNK_BYTES as u64) as usize
        + 4096;
    let mut staging = Staging::new(gpu, readers + 2, room, total);
    let (give, take) = mpsc::channel::<&mut [u8]>();
    for s in staging.slices() {
        give.send(s).expect("the receiver is here");
    }
    let take = std::sync::Mutex::new(take);
    let next = AtomicUsize::new(0);
    let (to_main, loaded) = mpsc::channel::<Loaded<'_, '_>>();
    std::thread::scope(|s| -> Result<(), ReplayError> {
        for _ in 0..readers {
            let (take, next, to_main, parts) = (&take, &next, to_main.clone(), &parts);
            s.spawn(move || loop {
                let Ok(staging) = take.lock().expect("no reader panics").recv() else {
                    return;
                };
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(_, id, _)) = parts.get(at) else {
                    return;
                };
                let part = blobs.read_part(&id, staging);
                if to_main.send(Loaded { at, part, staging }).is_err() {
                    return;
                }
            });
        }
        drop(to_main);
        let mut result = Ok(());
        for (done, l) in loaded.iter().enumerate() {
            let (i, _, off) = parts[l.at];
            let f = &fills[i];
            if result.is_ok() {
                result = match l.part {
                    // The trace's own error (a damaged part, a store without it), typed.
                    Err(e) => Err(ReplayError::Trace(e)),
                    Ok(ref p) => gpu
                        .copy_h2d(p.bytes(l.staging), f.dst.offset(off as usize))
                        .map_err(|e| ReplayError::Setup {
                            what: format!("restoring {}", f.buf),
                            cause: format!("{e:#}"),
                        }),
                };
            }
            if result.is_err() || done + 1 == parts.len() {
                // Stop handing out buffers: every reader then finds the queue closed.
                break;
            }
            let _ = give.send(l.staging);
        }
        drop(give);
        result
    })
}
