//! What a recorded call may write, as a flight checkpoint counts it: the buffers read back at
//! the next checkpoint are those the span's calls may have written, no more.

use super::flight::FlightStore;
use super::ring::Writes;
use crate::backend::{ParamAccess, ParamInfo};
use crate::trace::*;
use rustc_hash::FxHashMap as HashMap;

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
        Call::Launch { kernel, args, .. } | Call::LaunchTyped { kernel, args, .. } => {
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
                all: false,
                stream,
            }
        }
        other => Writes {
            bufs: crate::trace::written_by(other).into_iter().collect(),
            all: false,
            stream,
        },
    }
}
