//! What each call names and what it does with it: its device addresses (read, written, freed,
//! or given to a kernel), the streams it queues work on or only names, its events, graphs,
//! pinned host regions and blobs.
//!
//! One exhaustive match over `Call`, written once (`walk!`) and expanded twice: over `&Call`
//! (`Call::operands`, which `refs`, `written_by` and `Call::work_stream` read) and over
//! `&mut Call` (`Call::operands_mut`, which renames blobs in place). A new `Call` variant is a
//! compile error here until someone says what it names. The analyses that need extents (how
//! many bytes a copy touches, what a kernel's layout says of each parameter, a collective's
//! sizes by its communicator) read them in `analysis/access.rs`, beside the trace they need.

use super::call::*;

/// What a call does with a device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Reads the bytes there.
    Reads,
    /// Writes the bytes there.
    Writes,
    /// Gives it to a kernel, which may read and write through it.
    Kernel,
    /// Frees the allocation.
    Frees,
    /// Only names it (a tensor map is encoded for it).
    Names,
}

/// What a call does with a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// Queues work on it (a launch, an async copy, an event recorded or waited for).
    Work,
    /// Names it without queueing work (a sync, a capture's begin and end, a query).
    Names,
}

/// One thing a call names, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand<'a> {
    /// A device address, and what the call does with it.
    Dev(&'a DevAddr, Use),
    /// A stream, and whether the call queues work there.
    Stream(&'a StreamRef, On),
    /// The legacy stream a synchronous copy or memset runs on (the call has no field for it).
    Legacy,
    /// An event recorded, waited for, synchronised with or destroyed.
    Event(&'a EventId),
    /// A graph launched or destroyed.
    Graph(&'a GraphId),
    /// A pinned host region an async copy reads or writes, or one freed.
    Host(&'a HostAddr),
    /// The bytes a copy uploads.
    Blob(&'a BlobId),
}

/// One thing a call names, to be changed in place.
#[derive(Debug)]
pub enum OperandMut<'a> {
    /// As `Operand::Dev`.
    Dev(&'a mut DevAddr, Use),
    /// As `Operand::Stream`.
    Stream(&'a mut StreamRef, On),
    /// As `Operand::Legacy`.
    Legacy,
    /// As `Operand::Event`.
    Event(&'a mut EventId),
    /// As `Operand::Graph`.
    Graph(&'a mut GraphId),
    /// As `Operand::Host`.
    Host(&'a mut HostAddr),
    /// As `Operand::Blob`.
    Blob(&'a mut BlobId),
}

/// The walk, over `$call` (a `&Call` or a `&mut Call`: the bindings follow), handing each
/// operand to `$f` as an `$Op` (`Operand` or `OperandMut`); `$addrs` is the `Arg` method
/// that yields a launch argument's device addresses by the same reference.
macro_rules! walk {
    ($call:expr, $f:ident, $Op:ident, $addrs:ident) => {{
        use Call::*;
        match $call {
            Free { ptr } => $f($Op::Dev(ptr, Use::Frees)),
            CopyH2D { dst, data, .. } => {
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Blob(data));
                $f($Op::Legacy);
            }
            CopyD2H { src, .. } => {
                $f($Op::Dev(src, Use::Reads));
                $f($Op::Legacy);
            }
            CopyD2D { src, dst, .. } => {
                $f($Op::Dev(src, Use::Reads));
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Legacy);
            }
            Memset { dst, .. } => {
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Legacy);
            }
            Launch { head: LaunchHead { stream, .. }, args } | LaunchTyped { head: LaunchHead { stream, .. }, args } => {
                $f($Op::Stream(stream, On::Work));
                for a in args {
                    for d in a.$addrs() {
                        $f($Op::Dev(d, Use::Kernel));
                    }
                }
            }
            MemsetAsync { dst, stream, .. } => {
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Stream(stream, On::Work));
            }
            CopyD2HOnStream { src, stream, .. } => {
                $f($Op::Dev(src, Use::Reads));
                $f($Op::Stream(stream, On::Work));
            }
            CopyH2DAsync {
                dst, data, stream, ..
            } => {
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Blob(data));
                $f($Op::Stream(stream, On::Work));
            }
            CopyH2DAsyncRetained {
                dst,
                data,
                stream,
                src,
                ..
            } => {
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Blob(data));
                $f($Op::Stream(stream, On::Work));
                $f($Op::Host(src));
            }
            CopyD2HAsync {
                src, stream, dst, ..
            } => {
                $f($Op::Dev(src, Use::Reads));
                $f($Op::Stream(stream, On::Work));
                $f($Op::Host(dst));
            }
            CopyD2DAsync {
                src, dst, stream, ..
            }
            | CopyD2D2DAsync {
                src, dst, stream, ..
            } => {
                $f($Op::Dev(src, Use::Reads));
                $f($Op::Dev(dst, Use::Writes));
                $f($Op::Stream(stream, On::Work));
            }
            Synchronize { stream }
            | StreamIsCapturing { stream }
            | BeginCapture { stream }
            | EndCapture { stream }
            | AbortCaptureIfActive { stream } => $f($Op::Stream(stream, On::Names)),
            // Work on the stream in that its later work waits for it; it touches no buffer.
            HostFunc { stream, .. } => $f($Op::Stream(stream, On::Work)),
            LaunchGraph { graph, stream } => {
                $f($Op::Graph(graph));
                $f($Op::Stream(stream, On::Work));
            }
            DestroyGraph { graph } => $f($Op::Graph(graph)),
            RecordEvent { event, stream } | StreamWaitEvent { stream, event } => {
                $f($Op::Event(event));
                $f($Op::Stream(stream, On::Work));
            }
            EventSynchronize { event } | DestroyEvent { event } => $f($Op::Event(event)),
            HostPtrToDevice { host } | FreeHostPinned { host, .. } => $f($Op::Host(host)),
            EncodeTensorMap { base, .. } => $f($Op::Dev(base, Use::Names)),
            Collective {
                send,
                recv,
                stream,
                op,
                ..
            } => {
                $f($Op::Dev(send, Use::Reads));
                // A send's receive side is named but nothing lands there.
                let recv_use = if matches!(op, crate::backend::Collective::Send { .. }) {
                    Use::Names
                } else {
                    Use::Writes
                };
                $f($Op::Dev(recv, recv_use));
                $f($Op::Stream(stream, On::Work));
            }
            // Host-side, or device work the backend does for itself (red-zone scans and
            // poisoning, which synchronise anyway); what they create is their return value.
            Alloc { .. }
            | AllocManaged { .. }
            | DefaultStream
            | Kernel { .. }
            | OpCache
            | TotalMemory
            | FreeMemory
            | SmCount
            | SweepUnreleased
            | LiveBytes
            | AllocReport { .. }
            | ScanRedzones
            | PoisonRedzones { .. }
            | DebugSyncKernels
            | KernelRegistry
            | DeviceFreeMemory
            | LiveAllocCount
            | CreateStream
            | BindToThread
            | CreateEvent
            | AllocHostPinned { .. }
            | RedzoneHits
            | StepBoundary { .. }
            | CommUniqueId
            | CommInit { .. }
            | CommDestroy { .. }
            // Issue nothing themselves: the collectives between them name their streams.
            | CommGroupStart
            | CommGroupEnd
            // Not understood: what it touched is not known.
            | Opaque { .. } => {}
        }
    }};
}

impl Call {
    /// Each thing the call names, in its arguments' order (what it creates, its return
    /// value, is not among them).
    pub fn operands(&self, f: &mut dyn FnMut(Operand<'_>)) {
        walk!(self, f, Operand, device_addrs)
    }

    /// `operands`, each to be changed in place (ids renamed).
    pub fn operands_mut(&mut self, f: &mut dyn FnMut(OperandMut<'_>)) {
        walk!(self, f, OperandMut, device_addrs_mut)
    }

    /// The stream the call's device work runs on, if it queues any (the legacy stream for a
    /// synchronous copy or memset).
    pub fn work_stream(&self) -> Option<StreamRef> {
        let mut on = None;
        self.operands(&mut |o| match o {
            Operand::Stream(s, On::Work) => on = on.or(Some(*s)),
            Operand::Legacy => on = on.or(Some(StreamRef::Legacy)),
            _ => {}
        });
        on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(n: u32) -> DevAddr {
        DevAddr::Buf {
            buf: BufferId(n),
            off: 0,
        }
    }

    /// A launch given a struct with two pointers inside (a driver-level recording's): both
    /// buffers are named and may be written, and renaming walks reach both.
    #[test]
    fn every_pointer_in_a_struct_argument_is_an_operand() {
        let mut call = Call::Launch {
            head: LaunchHead {
                kernel: KernelId(0),
                grid: [1; 3],
                block: [1; 3],
                shared_mem: 0,
                stream: StreamRef::Id(StreamId(1)),
            },
            args: [
                Arg::Words(Box::new(WordsArg {
                    bytes: vec![0; 16],
                    ptrs: vec![(0, buf(3)), (8, buf(5))],
                    maps: vec![],
                })),
                Arg::Buf(buf(7)),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            super::super::refs(&call).bufs,
            vec![BufferId(3), BufferId(5), BufferId(7)]
        );
        assert_eq!(
            super::super::written_by(&call),
            vec![BufferId(3), BufferId(5), BufferId(7)]
        );
        assert_eq!(call.work_stream(), Some(StreamRef::Id(StreamId(1))));
        let mut seen = 0;
        call.operands_mut(&mut |o| {
            if let OperandMut::Dev(DevAddr::Buf { off, .. }, Use::Kernel) = o {
                *off += 1;
                seen += 1;
            }
        });
        assert_eq!(seen, 3);
        let mut offs = Vec::new();
        call.operands(&mut |o| {
            if let Operand::Dev(DevAddr::Buf { off, .. }, _) = o {
                offs.push(*off);
            }
        });
        assert_eq!(offs, vec![1, 1, 1]);
    }

    /// A synchronous copy runs on the legacy stream; a sync names its stream without work.
    #[test]
    fn work_streams_follow_what_a_call_queues() {
        let copy = Call::CopyD2H {
            src: buf(1),
            len: 4,
        };
        assert_eq!(copy.work_stream(), Some(StreamRef::Legacy));
        let sync = Call::Synchronize {
            stream: StreamRef::Id(StreamId(2)),
        };
        assert_eq!(sync.work_stream(), None);
        assert_eq!(super::super::refs(&sync).streams, vec![StreamId(2)]);
    }
}
