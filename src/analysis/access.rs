//! What each call does to device memory and to ordering, read off the trace.

use crate::backend::ParamAccess;
use crate::trace::*;

/// One access to a buffer's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub buf: BufferId,
    pub start: u64,
    /// Exclusive end; `u64::MAX` when the extent is unknown (a kernel argument).
    pub end: u64,
    pub write: bool,
    /// The address was in a buffer already freed when the call was made.
    pub freed: bool,
}

impl Access {
    pub fn overlaps(&self, o: &Access) -> bool {
        self.buf == o.buf && self.start < o.end && o.start < self.end
    }
}

fn range(a: &DevAddr, len: u64, write: bool, out: &mut Vec<Access>) {
    if let DevAddr::Buf { buf, off } | DevAddr::Freed { buf, off } = a {
        out.push(Access {
            buf: *buf,
            start: *off,
            end: off.saturating_add(len),
            write,
            freed: matches!(a, DevAddr::Freed { .. }),
        });
    }
}

/// The bytes a call reads and writes. Kernel arguments are read-write unless the kernel's
/// layout says otherwise, and reach to the end of their buffer (the launch does not say how far).
pub fn accesses(t: &Trace, c: &Call) -> Vec<Access> {
    use Call::*;
    let mut v = Vec::new();
    match c {
        CopyH2D { dst, len, .. }
        | CopyH2DAsync { dst, len, .. }
        | CopyH2DAsyncRetained { dst, len, .. } => range(dst, *len, true, &mut v),
        CopyD2H { src, len } | CopyD2HOnStream { src, len, .. } | CopyD2HAsync { src, len, .. } => {
            range(src, *len, false, &mut v)
        }
        CopyD2D { src, dst, len } | CopyD2DAsync { src, dst, len, .. } => {
            range(src, *len, false, &mut v);
            range(dst, *len, true, &mut v);
        }
        CopyD2D2DAsync {
            src,
            src_pitch,
            dst,
            dst_pitch,
            width,
            height,
            ..
        } => {
            let span = |pitch: u64| {
                pitch
                    .saturating_mul(height.saturating_sub(1))
                    .saturating_add(*width)
            };
            range(src, span(*src_pitch), false, &mut v);
            range(dst, span(*dst_pitch), true, &mut v);
        }
        Memset { dst, len, .. } | MemsetAsync { dst, len, .. } => range(dst, *len, true, &mut v),
        Launch { head, args } | LaunchTyped { head, args } => {
            let layout: &[crate::backend::ParamInfo] =
                t.kernels.get(&head.kernel).map_or(&[], |k| &k.params);
            for (i, a) in args.iter().enumerate() {
                for d in a.device_addrs() {
                    let (DevAddr::Buf { buf, off } | DevAddr::Freed { buf, off }) = d else {
                        continue;
                    };
                    // A tensor map's parameter is a by-value blob, but TMA may load or store
                    // through it: both. So may a kernel through an address in a struct.
                    let access = match a {
                        Arg::TensorMap(_) | Arg::Words(_) => ParamAccess::Unknown,
                        _ => layout.get(i).map_or(ParamAccess::Unknown, |p| p.access),
                    };
                    let (r, w) = match access {
                        ParamAccess::Read => (true, false),
                        ParamAccess::Write => (false, true),
                        ParamAccess::Value => (false, false),
                        ParamAccess::ReadWrite | ParamAccess::Unknown => (true, true),
                    };
                    let size = t.buffer_size(*buf).unwrap_or(u64::MAX);
                    for write in [false, true] {
                        if (write && w) || (!write && r) {
                            v.push(Access {
                                buf: *buf,
                                start: *off,
                                end: size.max(off.saturating_add(1)),
                                write,
                                freed: matches!(d, DevAddr::Freed { .. }),
                            });
                        }
                    }
                }
            }
        }
        // What these touch is not in the trace (a graph launch's nodes, a red-zone scan's
        // guard bands) or is not device memory at all.
        Alloc { .. }
        | AllocManaged { .. }
        | Free { .. }
        | Synchronize { .. }
        | DefaultStream
        | Kernel { .. }
        | OpCache
        | TotalMemory
        | FreeMemory
        | SmCount
        | SweepUnreleased
        | LiveBytes
        | AllocReport { .. }
        | StreamIsCapturing { .. }
        | ScanRedzones
        | PoisonRedzones { .. }
        | DebugSyncKernels
        | KernelRegistry
        | BeginCapture { .. }
        | EndCapture { .. }
        | LaunchGraph { .. }
        | DestroyGraph { .. }
        | AbortCaptureIfActive { .. }
        | DeviceFreeMemory
        | LiveAllocCount
        | CreateStream
        | BindToThread
        | CreateEvent
        | RecordEvent { .. }
        | StreamWaitEvent { .. }
        | EventSynchronize { .. }
        | DestroyEvent { .. }
        | HostPtrToDevice { .. }
        | AllocHostPinned { .. }
        | FreeHostPinned { .. }
        | RedzoneHits
        | StepBoundary { .. }
        | EncodeTensorMap { .. }
        | CommUniqueId
        | CommInit { .. }
        | CommDestroy { .. }
        | CommGroupStart
        | CommGroupEnd
        // Not understood: what it touched is not known (its replay is skipped, and said so).
        | Opaque { .. }
        // The program's own code, on the host: no device memory of the trace's.
        | HostFunc { .. } => {}
        Collective {
            comm,
            op,
            send,
            recv,
            count,
            dtype,
            ..
        } => {
            let n = comm_ranks(t, *comm);
            let (sb, rb) = (
                op.send_bytes(*count, *dtype, n),
                op.recv_bytes(*count, *dtype, n),
            );
            if sb > 0 {
                range(send, sb, false, &mut v);
            }
            if rb > 0 {
                range(recv, rb, true, &mut v);
            }
        }
    }
    v
}

/// Ranks in communicator `comm`, as its `comm_init` said (1 if the trace does not hold it).
fn comm_ranks(t: &Trace, comm: crate::trace::CommId) -> u32 {
    t.calls
        .iter()
        .find_map(|c| match (&c.call, &c.ret) {
            (Call::CommInit { nranks, .. }, Some(Ok(crate::trace::Value::Comm(id))))
                if *id == comm =>
            {
                Some(*nranks)
            }
            _ => None,
        })
        .unwrap_or(1)
}
