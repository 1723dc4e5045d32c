//! What a recorded call may write, as a flight checkpoint counts it: the buffers read back at
//! the next checkpoint are those the span's calls may have written, no more.

use super::flight::FlightStore;
use super::ring::Writes;
use super::state::RecState;
use crate::backend::{ParamAccess, ParamInfo};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;

/// What changed since the last flight checkpoint, which the next one reads back: kept apart
/// from `RecState`'s handle maps because only a flight recorder's checkpoints read it.
#[derive(Default)]
pub(crate) struct SinceCheckpoint {
    /// Buffers written since the last checkpoint.
    pub dirty: HashSet<BufferId>,
    /// Each buffer's contents at the last checkpoint.
    pub checkpointed: HashMap<BufferId, BlobId>,
    /// Bytes of live buffers no checkpoint has read (allocated since the last one): what the
    /// flight recorder's budget expects the next checkpoint to read at least.
    pub unread_bytes: u64,
    /// Buffers blocking `copy_h2d`s wrote since the last checkpoint, with the ranges they
    /// left known (offset -> length and blob; a later copy over part of a range makes all of
    /// that range unknown). The copies' bytes are in the trace already, so a device
    /// checkpoint reads only the rest (a model's weights, loaded after arming, into an
    /// arena: its alignment gaps).
    pub filled: HashMap<BufferId, BTreeMap<u64, (u64, BlobId)>>,
    /// The streams the span before the last checkpoint queued device work on
    /// (`begin_checkpoint`), which a device checkpoint orders itself after.
    pub span_streams: HashSet<StreamRef>,
}

/// What each live graph's captured calls write (they are in the store while the graph
/// lives): a launch of the graph writes that, not every buffer, so a graph-launched engine's
/// checkpoint reads back its step's outputs, not its weights.
pub(super) fn graph_writes(
    f: &FlightStore,
    layouts: &HashMap<KernelId, &[ParamInfo]>,
) -> HashMap<GraphId, Writes> {
    let mut graphs: HashMap<GraphId, Writes> = HashMap::default();
    for (g, frames) in f.graph_frames() {
        let mut acc = Writes::default();
        for rec in frames {
            if let Ok(Frame::Begin(b)) = crate::trace::codec::decode(rec) {
                let w = call_writes(&b.call, layouts, &HashMap::default());
                acc.bufs.extend(w.bufs);
                acc.all |= w.all;
            }
        }
        graphs.insert(g, acc);
    }
    graphs
}

/// What `call` may write, as a flight checkpoint counts it (`layouts`: the kernels' parameter
/// layouts by id; `graphs`: what each live graph's captured calls write).
pub(super) fn call_writes(
    call: &Call,
    layouts: &HashMap<KernelId, &[ParamInfo]>,
    graphs: &HashMap<GraphId, Writes>,
) -> Writes {
    // Device work that may outlast the call: not a blocking copy from or to the host.
    let stream = match call {
        Call::CopyH2D { .. } | Call::CopyD2H { .. } => None,
        other => other.work_stream(),
    };
    let anything = || Writes {
        all: true,
        stream,
        ..Writes::default()
    };
    match call {
        Call::LaunchGraph { graph, .. } => graphs.get(graph).map_or_else(anything, |w| Writes {
            stream,
            ..w.clone()
        }),
        // A raw launch of a kernel without a layout records no arguments: it may have
        // written anything.
        Call::Launch { args, .. } if args.is_empty() => anything(),
        Call::Launch {
            head: LaunchHead { kernel, .. },
            args,
            ..
        }
        | Call::LaunchTyped {
            head: LaunchHead { kernel, .. },
            args,
            ..
        } => {
            let layout = layouts.get(kernel).copied().unwrap_or(&[]);
            let mut bufs = smallvec::SmallVec::new();
            for (i, a) in args.iter().enumerate() {
                // TMA may store through a tensor map: its buffer counts as written.
                let read_only = !matches!(a, Arg::TensorMap(_))
                    && matches!(
                        layout.get(i).map(|p| p.access),
                        Some(ParamAccess::Read | ParamAccess::Value)
                    );
                if let (Some(DevAddr::Buf { buf, .. }), false) = (a.device_addr(), read_only) {
                    bufs.push(*buf);
                }
            }
            Writes {
                bufs,
                stream,
                ..Writes::default()
            }
        }
        other => Writes {
            bufs: crate::trace::written_by(other).into_iter().collect(),
            stream,
            ..Writes::default()
        },
    }
}

/// What a flight recorder's span wrote, as its checkpoints need it.
impl RecState {
    /// The buffers the calls of the flight recorder's current span may have written, read off
    /// their Begin records once per distinct call: copy and memset destinations, a launch's
    /// pointer arguments its layout does not call read-only, everything for a graph launch.
    ///
    /// Then the store's next span begins. `false`: not a flight recorder.
    pub fn begin_checkpoint(&mut self) -> bool {
        let Some(f) = self.flight.as_deref_mut() else {
            return false;
        };
        let layouts: HashMap<KernelId, &[ParamInfo]> = self
            .kernels
            .values()
            .filter_map(|k| Some((k.id, k.params.as_deref()?)))
            .collect();
        let graphs = graph_writes(f, &layouts);
        let mut all = false;
        let dirty = &mut self.since.dirty;
        let streams = &mut self.since.span_streams;
        streams.clear();
        f.span_writes(
            |record| match crate::trace::codec::decode(record) {
                // Noted as each was made (`note_fill`), in order.
                Ok(Frame::Begin(b))
                    if matches!(b.call, Call::CopyH2D { .. } | Call::StepBoundary { .. }) =>
                {
                    Writes {
                        deltas_write_nothing: true,
                        ..Writes::default()
                    }
                }
                Ok(Frame::Begin(b)) => call_writes(&b.call, &layouts, &graphs),
                _ => Writes::default(),
            },
            |w| {
                all |= w.all;
                dirty.extend(w.bufs.iter().copied());
                streams.extend(w.stream);
            },
        );
        if all {
            self.since.dirty.extend(self.bufs.values().map(|x| x.id));
        }
        // Filled by copies: written too, for a checkpoint that reads back (a device
        // checkpoint takes `filled` first and knows their bytes).
        self.since
            .dirty
            .extend(self.since.filled.drain().map(|(b, _)| b));
        f.begin_checkpoint();
        true
    }

    /// A blocking `copy_h2d` of `data` (`len` bytes) to `dst`, as the flight recorder notes
    /// it (`filled`). Such copies are not among a span's writes (`begin_checkpoint`).
    pub fn note_fill(&mut self, dst: &DevAddr, data: BlobId, len: u64) {
        if self.flight.is_none() {
            return;
        }
        if let DevAddr::Buf { buf, off } = *dst {
            let ranges = self.since.filled.entry(buf).or_default();
            let end = off.saturating_add(len);
            // Ranges that overlap [off, end): the one starting before it, and those inside.
            let over: Vec<u64> = ranges
                .range(..end)
                .rev()
                .take_while(|(o, (l, _))| o.saturating_add(*l) > off || **o >= off)
                .filter(|(o, (l, _))| o.saturating_add(*l) > off)
                .map(|(o, _)| *o)
                .collect();
            for o in over {
                ranges.remove(&o);
            }
            if len > 0 {
                ranges.insert(off, (len, data));
            }
        }
    }
}
