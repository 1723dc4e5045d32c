//! The record table: every record kind once, with its type byte, the entry points it stands
//! for, whether a flight ring keeps it for good, and its fields in the order they are written,
//! each with its kind (`wire.rs`) and what a reader calls it in an error. `Rec`, its `tag`,
//! `family` and `is_state`, and the body's encoder and decoder are all made from it.

use std::borrow::Cow;

use crate::wire::{put, Fields};
use crate::{LogError, On};

/// Makes `Rec` and its codec from the table below. Each entry:
/// `TAG Name "family" state|work { field: Type = kind("what"), ... }`.
macro_rules! records {
    ($(
        $(#[$doc:meta])*
        $tag:literal $name:ident $family:literal $keep:ident {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty = $kind:ident($what:literal) ),* $(,)?
        }
    )*) => {
        /// The calls the shim understands. Handles and addresses are the process's own numbers;
        /// the reader maps them to the trace's ids.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Rec<'a> {
            $( $(#[$doc])* $name { $( $(#[$fdoc])* $field: $ty ),* }, )*
        }

        impl Rec<'_> {
            /// The driver entry points the record stands for, for a person
            /// (`cuStreamSynchronize`).
            pub fn family(&self) -> &'static str {
                match self { $( Rec::$name { .. } => $family, )* }
            }

            /// Whether a flight ring keeps this record for as long as the process lives rather
            /// than only while it is recent: what defines the state later calls run against
            /// (allocations, modules, kernels, streams, events, tensor maps, graphs, the names
            /// later records use), not the work itself.
            pub fn is_state(&self) -> bool {
                match self { $( Rec::$name { .. } => records!(@keep $keep), )* }
            }

            /// The record's type byte in the log (what a reader dispatches on).
            pub fn tag(&self) -> u8 {
                match self { $( Rec::$name { .. } => $tag, )* }
            }
        }

        /// Appends the body of `call` (what follows the fixed part).
        pub(crate) fn encode_body(call: &Rec<'_>, out: &mut Vec<u8>) {
            match call {
                $( Rec::$name { $($field),* } => { $( put::$kind(out, $field); )* } )*
            }
        }

        /// The record of type `tag` whose body `f` reads (fields are read in the order
        /// written: a struct expression evaluates its fields in order).
        pub(crate) fn decode_body<'a>(tag: u8, f: &mut Fields<'a>) -> Result<Rec<'a>, LogError> {
            Ok(match tag {
                $( $tag => Rec::$name { $( $field: f.$kind($what)?, )* }, )*
                tag => return Err(LogError::UnknownTag { offset: f.offset, tag }),
            })
        }
    };
    (@keep state) => { true };
    (@keep work) => { false };
}

records! {
    /// `cuMemAlloc*`: `ptr` is the new allocation.
    1 Alloc "cuMemAlloc" state {
        ptr: u64 = u64("pointer"),
        bytes: u64 = u64("size"),
        managed: bool = flag("managed flag"),
    }
    /// `cuMemFree*`.
    2 Free "cuMemFree" state { ptr: u64 = u64("pointer") }
    /// `cuMemAllocHost*`, `cuMemHostAlloc`: a pinned host region.
    3 HostAlloc "cuMemHostAlloc" state {
        ptr: u64 = u64("pointer"),
        bytes: u64 = u64("size"),
    }
    /// `cuMemFreeHost`.
    4 HostFree "cuMemFreeHost" state { ptr: u64 = u64("pointer") }
    /// `cuMemcpyHtoD*`: `data` is the source's bytes when the call was made.
    5 CopyH2D "cuMemcpyHtoD" work {
        dst: u64 = u64("destination"),
        on: On = on("stream"),
        data: &'a [u8] = bytes("data"),
    }
    /// `cuMemcpyDtoH*`: for the blocking form `data` is what arrived; for the async form it
    /// is empty and a [`Rec::D2HBytes`] follows at the sync that made the bytes visible.
    6 CopyD2H "cuMemcpyDtoH" work {
        src: u64 = u64("source"),
        dst_host: u64 = u64("host destination"),
        len: u64 = u64("length"),
        on: On = on("stream"),
        data: &'a [u8] = bytes("data"),
    }
    /// The bytes of the async device-to-host copy recorded `copy` records earlier in the file
    /// (its index among all records, from 0), read after a sync it had to be done by.
    7 D2HBytes "cuMemcpyDtoH" work {
        copy: u64 = u64("copy index"),
        data: &'a [u8] = bytes("data"),
    }
    /// `cuMemcpyDtoD*`, and `cuMemcpy*` between two device addresses.
    8 CopyD2D "cuMemcpyDtoD" work {
        src: u64 = u64("source"),
        dst: u64 = u64("destination"),
        len: u64 = u64("length"),
        on: On = on("stream"),
    }
    /// `cuMemsetD8/D16/D32*`: `count` elements of `elem` bytes (1, 2 or 4), each `value`.
    9 Memset "cuMemset" work {
        dst: u64 = u64("destination"),
        value: u32 = u32("value"),
        elem: u8 = u8("element size"),
        count: u64 = u64("count"),
        on: On = on("stream"),
    }
    /// `cuModuleLoadData*`, `cuModuleLoadFatBinary`, `cuLibraryLoadData`, and the file forms:
    /// `image` is the whole image (fatbin, cubin or PTX) the driver was given.
    10 ModuleLoad "cuModuleLoad" state {
        handle: u64 = u64("handle"),
        library: bool = flag("library flag"),
        image: &'a [u8] = bytes("image"),
    }
    /// `cuModuleUnload`, `cuLibraryUnload`.
    11 ModuleUnload "cuModuleUnload" state {
        handle: u64 = u64("handle"),
        library: bool = flag("library flag"),
    }
    /// `cuModuleGetFunction` (`library` false: `owner` a module, `handle` a `CUfunction`) and
    /// `cuLibraryGetKernel` (`library` true: `owner` a library, `handle` a `CUkernel`).
    12 Function "cuModuleGetFunction" state {
        owner: u64 = u64("owner"),
        library: bool = flag("library flag"),
        handle: u64 = u64("handle"),
        name: &'a [u8] = str("name"),
    }
    /// `cuKernelGetFunction`: the `CUfunction` of a `CUkernel` in the current context.
    13 KernelFunction "cuKernelGetFunction" state {
        kernel: u64 = u64("kernel"),
        func: u64 = u64("function"),
    }
    /// `cuLaunchKernel*`, `cuLaunchKernelEx*`: `func` as passed (a `CUfunction` or a
    /// `CUkernel`); `cluster` the thread-block cluster `cuLaunchKernelEx` asked for (zeros:
    /// none); `layout` the parameters' (offset, size) as the driver gave them (`None` when it
    /// could not); `params` the parameter bytes laid out by it. The shim's hot path writes
    /// these bytes without building the record (`encode_launch`, tag `TAG_LAUNCH`; a test holds
    /// the two equal).
    14 Launch "cuLaunchKernel" work {
        func: u64 = u64("function"),
        grid: [u32; 3] = dims("launch dimensions"),
        block: [u32; 3] = dims("launch dimensions"),
        cluster: [u32; 3] = dims("launch dimensions"),
        shared_mem: u32 = u32("shared memory"),
        stream: u64 = u64("stream"),
        /// Borrowed when written (the shim keeps one per function), owned when read.
        layout: Option<Cow<'a, [(u32, u32)]>> = layout("parameter layout"),
        params: &'a [u8] = bytes("parameters"),
    }
    /// `cuStreamCreate*`.
    15 StreamCreate "cuStreamCreate" state {
        stream: u64 = u64("stream"),
        flags: u32 = u32("flags"),
    }
    /// `cuStreamDestroy*`.
    16 StreamDestroy "cuStreamDestroy" state { stream: u64 = u64("stream") }
    /// `cuEventCreate`.
    17 EventCreate "cuEventCreate" state {
        event: u64 = u64("event"),
        flags: u32 = u32("flags"),
    }
    /// `cuEventDestroy*`.
    18 EventDestroy "cuEventDestroy" state { event: u64 = u64("event") }
    /// `cuEventRecord*`.
    19 EventRecord "cuEventRecord" work {
        event: u64 = u64("event"),
        stream: u64 = u64("stream"),
    }
    /// `cuStreamWaitEvent*`.
    20 StreamWaitEvent "cuStreamWaitEvent" work {
        stream: u64 = u64("stream"),
        event: u64 = u64("event"),
    }
    /// `cuEventSynchronize`.
    21 EventSync "cuEventSynchronize" work { event: u64 = u64("event") }
    /// `cuStreamSynchronize*`.
    22 StreamSync "cuStreamSynchronize" work { stream: u64 = u64("stream") }
    /// `cuCtxSynchronize`.
    23 CtxSync "cuCtxSynchronize" work {}
    /// A call that changes what the device holds or runs, which the shim does not understand:
    /// its entry point's name. A replay cannot do it, and says so.
    24 Opaque "an opaque call" work { name: &'a [u8] = str("name") }
    /// `cuMemAddressReserve`: a range of virtual addresses (the allocator's expandable
    /// segments), backed piecewise by `Map`s.
    25 Reserve "cuMemAddressReserve" state {
        ptr: u64 = u64("address"),
        size: u64 = u64("size"),
    }
    /// `cuMemAddressFree`.
    26 Unreserve "cuMemAddressFree" state {
        ptr: u64 = u64("address"),
        size: u64 = u64("size"),
    }
    /// `cuMemMap`: `size` bytes at `ptr` now backed by physical memory (written by older
    /// shims; `MapHandle` says which memory).
    27 Map "cuMemMap" state {
        ptr: u64 = u64("address"),
        size: u64 = u64("size"),
    }
    /// `cuMemUnmap`.
    28 Unmap "cuMemUnmap" state {
        ptr: u64 = u64("address"),
        size: u64 = u64("size"),
    }
    /// `cuTensorMapEncodeTiled`: the 128 bytes it wrote (`map`, which launches then pass by
    /// value) and everything it was given: the element type (`CUtensorMapDataType`), the
    /// global address, the dimensions, strides (`rank - 1`), box and element strides, and
    /// interleave, swizzle, L2 promotion and out-of-bounds fill.
    29 TensorMap "cuTensorMapEncodeTiled" state {
        map: &'a [u8] = bytes("tensor map"),
        dtype: u32 = u32("element type"),
        base: u64 = u64("global address"),
        dims: Vec<u64> = list64("dimensions"),
        strides: Vec<u64> = list64("strides"),
        box_dims: Vec<u32> = list32("box"),
        element_strides: Vec<u32> = list32("element strides"),
        modes: [u32; 4] = u32x4("modes"),
    }
    /// A flight dump (`GPUTAPE_SHIM_FLIGHT_DIR`) left out `dropped` records here: the ring of
    /// recent calls had wrapped. Records keep their indices (the next one's is this many
    /// higher), so a `D2HBytes` still names its copy.
    30 Gap "(dropped records)" work { dropped: u64 = u64("dropped count") }
    /// The flight recorder dumped here, and why (`reason`, words for a person: the call that
    /// returned the fault, whose code is the record's status, or a hang, status 0). The last
    /// record of a dump; a hang's blocked calls come just before it, with
    /// `STATUS_NOT_RETURNED`.
    31 Dump "(flight dump)" work { reason: &'a [u8] = str("reason") }
    /// `cuStreamBeginCapture*`: work on `stream` is captured from here (`mode` the driver's
    /// `CUstreamCaptureMode`: 0 global, 1 thread-local, 2 relaxed). A graph is launched long
    /// after it was made: its capture, and what the ring keeps between a begin and its end,
    /// are state.
    32 CaptureBegin "cuStreamBeginCapture" state {
        stream: u64 = u64("stream"),
        mode: u32 = u32("capture mode"),
    }
    /// `cuStreamEndCapture*`: the capture on `stream` ended, making `graph` (0 when it failed).
    33 CaptureEnd "cuStreamEndCapture" state {
        stream: u64 = u64("stream"),
        graph: u64 = u64("graph"),
    }
    /// `cuGraphInstantiate*`: `exec` made from `graph`.
    34 GraphInstantiate "cuGraphInstantiate" state {
        exec: u64 = u64("executable graph"),
        graph: u64 = u64("graph"),
    }
    /// `cuGraphLaunch*`.
    35 GraphLaunch "cuGraphLaunch" work {
        exec: u64 = u64("executable graph"),
        stream: u64 = u64("stream"),
    }
    /// `cuGraphExecDestroy`.
    36 GraphExecDestroy "cuGraphExecDestroy" state { exec: u64 = u64("executable graph") }
    /// `cuGraphDestroy`.
    37 GraphDestroy "cuGraphDestroy" state { graph: u64 = u64("graph") }
    /// A Python code object, the first time a stack holds it: what turns a frame's
    /// instruction offset into a line, read offline (`co_linetable`'s format is CPython's, of
    /// minor version `py_minor`). `id` is the log's own number for it: a freed code object's
    /// address is reused, so addresses are not names.
    38 Code "(Python code object)" state {
        id: u32 = u32("code id"),
        py_minor: u8 = u8("Python minor version"),
        first_line: i32 = i32("first line"),
        filename: &'a [u8] = str("file name"),
        qualname: &'a [u8] = str("qualified name"),
        linetable: &'a [u8] = bytes("line table"),
    }
    /// A calling thread's Python frames, innermost first, named once: `frames` is
    /// little-endian (code id, instruction index) pairs, 8 bytes each ([`crate::stack_frames`]);
    /// none for a Python thread with no Python frame (autograd's backward thread).
    39 Stack "(Python stack)" state {
        id: u32 = u32("stack id"),
        frames: &'a [u8] = pairs("stack frames"),
    }
    /// `cuModuleGetGlobal_v2` (`library` false) or `cuLibraryGetGlobal` (true): module
    /// variable `name` of `owner` (a `__constant__` or `__device__` symbol) lies at `ptr`,
    /// `bytes` long. Memory of its own that no allocation holds.
    40 Global "cuModuleGetGlobal" state {
        owner: u64 = u64("owner"),
        library: bool = flag("library flag"),
        name: &'a [u8] = str("name"),
        ptr: u64 = u64("address"),
        bytes: u64 = u64("size"),
    }
    /// `cuLibraryGetModule`: `module` is library `library`'s module in the current context
    /// (the CUDA runtime asks a variable's address of it).
    41 LibraryModule "cuLibraryGetModule" state {
        library: u64 = u64("library"),
        module: u64 = u64("module"),
    }
    /// A native frame, the first time a stack holds it: the module (its path as the loader
    /// has it) and the offset of the return address in it, and the nearest exported symbol
    /// the loader knows (empty when none) with the offset into it. A program without Python
    /// has no line: its sites are these.
    42 NativeFrame "(native frame)" state {
        id: u32 = u32("native frame id"),
        module: &'a [u8] = str("module"),
        offset: u64 = u64("offset"),
        symbol: &'a [u8] = str("symbol"),
        symbol_offset: u64 = u64("symbol offset"),
    }
    /// A calling thread's native frames outside the shim, innermost first, named once:
    /// `frames` is little-endian `NativeFrame` ids, 4 bytes each ([`crate::native_frames`]).
    /// Its id is of the same numbering as `Stack`'s: a record's stack is one or the other.
    43 NativeStack "(native stack)" state {
        id: u32 = u32("stack id"),
        frames: &'a [u8] = ids("native frames"),
    }
    /// `cuLaunchCooperativeKernel*`, or `cuLaunchKernelEx*` with the cooperative attribute:
    /// written just before the launch's own `Launch` record (it travels with it), which it
    /// marks as one whose blocks must all be resident at once (`this_grid().sync()`).
    44 Cooperative "cuLaunchCooperativeKernel" work { func: u64 = u64("function") }
    /// `cuGraphAdd*Node` (a kernel, copy or memset node): the same thread's next record is
    /// not work queued now but a node added to `graph`, run at each launch of an executable
    /// made from it (a ring keeps that record for good too). Nodes are logged in the order
    /// they were added, which their dependencies allow (a node's dependencies exist before
    /// it).
    45 GraphNode "cuGraphAddNode" state { graph: u64 = u64("graph") }
    /// The device a context was made on (`cuDevicePrimaryCtxRetain`, `cuCtxCreate*`), the first
    /// time it is: its ordinal, name, SMs and bytes of memory, as the driver reports them
    /// (what a trace says it was recorded on).
    46 Device "cuDevicePrimaryCtxRetain" state {
        ordinal: u32 = u32("device ordinal"),
        sm_count: u32 = u32("SM count"),
        total_memory: u64 = u64("device memory"),
        name: &'a [u8] = bytes("device name"),
    }
    /// Managed memory the host wrote since the device last ran: `data` at `dst`, as the host
    /// left it before the work this record precedes (the shim compares each managed
    /// allocation with what it last saw while the device was idle).
    47 ManagedWrite "(managed memory)" work {
        dst: u64 = u64("managed address"),
        data: &'a [u8] = bytes("managed bytes"),
    }
    /// Managed memory the device changed, as the host sees it once a context sync returned:
    /// `data` at `src` (what the program can read with plain loads, no copy).
    48 ManagedRead "(managed memory)" work {
        src: u64 = u64("managed address"),
        data: &'a [u8] = bytes("managed bytes"),
    }
    /// `cuThreadExchangeStreamCaptureMode`: the calling thread's capture interaction mode is
    /// `mode` from here (0 global, 1 thread-local, 2 relaxed), as PyTorch's allocator sets it
    /// around each allocation it makes while a capture is open.
    49 CaptureMode "cuThreadExchangeStreamCaptureMode" work { mode: u32 = u32("capture mode") }
    /// `cuLaunchHostFunc*`, `cuStreamAddCallback*`: the program's own function `func` (its
    /// symbol, or module + offset where it exports none) runs on the host once the work before
    /// it on `stream` is done, and the stream's later work waits for it to return.
    50 HostFunc "cuLaunchHostFunc" work {
        stream: u64 = u64("stream"),
        func: &'a [u8] = str("function"),
    }
    /// A graph node's work follows: the same thread's next record is not work queued now but
    /// what node `node` runs. `how` says where: 0, added to graph `target` (`cuGraphAdd*Node`;
    /// nodes are logged in the order added, which their dependencies allow); 1, the node's new
    /// parameters in the graph that holds it (`cuGraph*NodeSetParams`: instantiations made
    /// from here run them); 2, its new parameters in executable graph `target`
    /// (`cuGraphExec*NodeSetParams`: that executable's later launches run them). A node that
    /// runs as several records (a memset of several rows) marks each, `first` on its first:
    /// that one replaces what the node ran before. Supersedes `GraphNode`, which a reader
    /// takes as `how` 0 of an unnamed node.
    51 NodeWork "cuGraphAddNode" state {
        target: u64 = u64("graph or executable"),
        node: u64 = u64("graph node"),
        how: u8 = u8("node change kind"),
        first: bool = flag("first record flag"),
    }
    /// `cuGraphExecUpdate*`: executable `exec` runs graph `graph`'s nodes and parameters from
    /// here (logged only when the driver took the update).
    52 GraphUpdate "cuGraphExecUpdate" state {
        exec: u64 = u64("executable graph"),
        graph: u64 = u64("graph"),
    }
    /// `cuGraphAddChildGraphNode`: node `node` of `graph` runs graph `child`'s nodes (the
    /// driver embeds a copy of `child` as it is now).
    53 ChildGraph "cuGraphAddChildGraphNode" state {
        graph: u64 = u64("graph"),
        node: u64 = u64("graph node"),
        child: u64 = u64("child graph"),
    }
    /// `cuGraphClone`: `clone` is a copy of `original` as it is now.
    54 GraphClone "cuGraphClone" state {
        clone: u64 = u64("graph clone"),
        original: u64 = u64("graph"),
    }
    /// `cuGraphNodeSetEnabled`: node `node` of executable `exec` runs at its launches, or not.
    55 NodeEnabled "cuGraphNodeSetEnabled" state {
        exec: u64 = u64("executable graph"),
        node: u64 = u64("graph node"),
        enabled: bool = flag("enabled flag"),
    }
    /// Pinned host memory the device reads and writes where it lies, from here: allocated or
    /// registered with the device-map flag (`cuMemHostAlloc`, `cuMemHostRegister`), or a
    /// region a device address was asked of (`cuMemHostGetDevicePointer`). `ptr` is its base
    /// (the device's address for it too, under unified addressing), `bytes` its size. Followed
    /// like managed memory from here (`ManagedWrite`, `ManagedRead`).
    56 HostMapped "cuMemHostRegister" state {
        ptr: u64 = u64("host address"),
        bytes: u64 = u64("size"),
    }
    /// A region `HostMapped` named is freed or unregistered: the device no longer maps it.
    57 HostUnmapped "cuMemHostUnregister" state { ptr: u64 = u64("host address") }
    /// `cuLaunchKernelEx*`'s attributes other than its cluster shape and the cooperative flag,
    /// as (attribute id, the first 8 bytes of its value) pairs: written just before the
    /// launch's own `Launch` record (it travels with it), for function `func`.
    58 LaunchAttrs "cuLaunchKernelEx" work {
        func: u64 = u64("function"),
        attrs: Vec<u64> = list64("launch attributes"),
    }
    /// `cuStreamWriteValue32/64*`: `data` (4 or 8 bytes) written at `dst` in stream order on
    /// `on`, as an upload would; a flag another stream may wait for (`ValueWait`).
    59 ValueWrite "cuStreamWriteValue32" work {
        dst: u64 = u64("destination"),
        on: On = on("stream"),
        data: &'a [u8] = bytes("value bytes"),
    }
    /// `cuStreamWaitValue32/64*`: `stream`'s later work waits until the `wide` (64-bit) or
    /// 32-bit value at `addr` meets `value` as `flags` says (`CUstreamWaitValue_flags`: 0
    /// greater or equal, 1 equal, 2 and, 3 nor).
    60 ValueWait "cuStreamWaitValue32" work {
        stream: u64 = u64("stream"),
        addr: u64 = u64("address"),
        value: u64 = u64("value"),
        flags: u32 = u32("wait flags"),
        wide: bool = flag("64-bit flag"),
    }
    /// The same thread's last work record (and the records of the same call before it, a
    /// copy of several rows) was captured as graph node `node` (`cuStreamGetCaptureInfo`'s
    /// dependencies just after it): what later new parameters for that node name.
    61 CapturedNode "cuStreamGetCaptureInfo" state { node: u64 = u64("graph node") }
    /// `cuIpcGetMemHandle`: the allocation holding `ptr` is shared with other processes
    /// under `handle` (the 64 bytes the driver wrote).
    62 IpcExport "cuIpcGetMemHandle" state {
        ptr: u64 = u64("device address"),
        handle: &'a [u8] = bytes("IPC handle"),
    }
    /// `cuIpcOpenMemHandle*`: another process's allocation, shared under `handle`, is at
    /// `ptr` here, `bytes` long; `data` its bytes as they were when opened (empty when not
    /// read: a flight recording, or past the shim's limit).
    63 IpcImport "cuIpcOpenMemHandle" state {
        ptr: u64 = u64("device address"),
        bytes: u64 = u64("size"),
        handle: &'a [u8] = bytes("IPC handle"),
        data: &'a [u8] = bytes("bytes when opened"),
    }
    /// `cuIpcCloseMemHandle`: the shared allocation at `ptr` is no longer mapped here.
    64 IpcClose "cuIpcCloseMemHandle" state { ptr: u64 = u64("device address") }
    /// The wall clock (nanoseconds since the Unix epoch) when this record was written: with the
    /// record's own time it says when the log's time 0 was, so that the logs of processes that
    /// shared memory can be laid on one clock (a joint replay orders their calls by it).
    65 WallClock "(recording clock)" state { wall_ns: u64 = u64("wall clock") }
    /// `cuIpcGetEventHandle`: `event` is shared with other processes under `handle`.
    66 IpcEventExport "cuIpcGetEventHandle" state {
        event: u64 = u64("event"),
        handle: &'a [u8] = bytes("IPC handle"),
    }
    /// `cuIpcOpenEventHandle`: another process's event, shared under `handle`, is `event` here.
    67 IpcEventImport "cuIpcOpenEventHandle" state {
        event: u64 = u64("event"),
        handle: &'a [u8] = bytes("IPC handle"),
    }
    /// `cuGraphDestroyNode`: node `node` is gone from the graph that held it.
    68 NodeDestroyed "cuGraphDestroyNode" state { node: u64 = u64("graph node") }
    /// `cuGraphExecChildGraphNodeSetParams`: child-graph node `node` of executable `exec` runs
    /// graph `child`'s nodes (as they are now) from its next launch.
    69 ExecChildGraph "cuGraphExecChildGraphNodeSetParams" state {
        exec: u64 = u64("executable graph"),
        node: u64 = u64("graph node"),
        child: u64 = u64("child graph"),
    }
    /// `cuMemMap`: `size` bytes at `ptr` now backed by physical allocation `handle` from its
    /// byte `offset` (what `Map` says, and which memory: a shared allocation's mapping is found
    /// by its handle). Written instead of `Map` from this kind on.
    70 MapHandle "cuMemMap" state {
        ptr: u64 = u64("address"),
        size: u64 = u64("size"),
        offset: u64 = u64("offset"),
        handle: u64 = u64("allocation handle"),
    }
    /// `cuMemExportToShareableHandle`: physical allocation `handle` is shared with other
    /// processes as a handle of driver type `kind`; `key` is what names it in the processes
    /// that import it (a file descriptor: the exporting process's id and the number of the
    /// shim's own duplicate of it, 4 bytes each; a fabric handle: its 64 bytes), empty when
    /// nothing can name it.
    71 ShareableExport "cuMemExportToShareableHandle" state {
        handle: u64 = u64("allocation handle"),
        kind: u32 = u32("handle type"),
        key: &'a [u8] = bytes("shared key"),
    }
    /// `cuMemImportFromShareableHandle`: another process's physical allocation is `handle`
    /// here; `key` the exporter's `ShareableExport` key it was found to be (empty when the
    /// exporter could not be told).
    72 ShareableImport "cuMemImportFromShareableHandle" state {
        handle: u64 = u64("allocation handle"),
        kind: u32 = u32("handle type"),
        key: &'a [u8] = bytes("shared key"),
    }
    /// `cuMemSetAccess` made the mapping at `ptr` of an imported allocation readable: `data`
    /// its bytes then (empty when not read: a flight recording, or past the shim's limit), what
    /// a replay of this process alone starts from.
    73 ImportedBytes "cuMemSetAccess" state {
        ptr: u64 = u64("address"),
        data: &'a [u8] = bytes("bytes when mapped"),
    }
}
