//! Plain values the trait passes around. None of them owns anything: a `DevicePtr` is an
//! address, a handle is a number the backend that issued it knows how to read.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A device address. Kept as a bare `u64` newtype (not a reference-counted buffer) because the
/// engines this trait serves hand out interior views (`offset`) freely and free by base address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// Address 0: no allocation. What a kernel's optional buffer argument passes for "none".
    pub const NULL: DevicePtr = DevicePtr(0);

    /// A view `bytes` further into the same allocation. Wrapping, not checked: bounds are the
    /// backend's business (the mock checks them at use, CUDA faults).
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes as u64))
    }

    /// The address as a number, for arithmetic and for printing.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Whether this is address 0.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A guard band found written past an allocation's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RedzoneHit {
    /// The allocation's base address.
    pub base: DevicePtr,
    /// First and last changed byte, as offsets past the allocation's end.
    pub first: usize,
    /// See `first`: inclusive, so a one-byte overrun has `first == last`.
    pub last: usize,
}

/// A loaded kernel function. The value is backend-private (CUfunction on CUDA, an index on the
/// mock); only the backend that issued it may interpret it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelHandle(pub u64);

/// An instantiated, launchable graph. Backend-private like `KernelHandle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphHandle(pub u64);

/// One argument of `launch_typed`. Saying outright which arguments are buffers is what lets
/// a recorder name the buffer without guessing from the bit pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelArg<'a> {
    /// A device address, passed as its 8 bytes; a recorder names the buffer it lies in.
    Buffer(DevicePtr),
    /// A value passed as its bytes, laid out as the kernel's parameter (a scalar, a struct, a
    /// tensor map).
    Bytes(&'a [u8]),
}

impl KernelArg<'_> {
    /// Convenience for the scalar arguments kernels take most often.
    pub fn u32(v: &u32) -> KernelArg<'_> {
        KernelArg::Bytes(bytemuck_u32(v))
    }
}

fn bytemuck_u32(v: &u32) -> &[u8] {
    // Reinterpreting a u32 as its 4 native-endian bytes; std offers no safe borrow for that,
    // so go through a slice of one element.
    let s: &[u32] = std::slice::from_ref(v);
    // SAFETY: u32 has no padding and any byte pattern is a valid u8; the length is exactly
    // size_of::<u32>() and the borrow keeps `v` alive.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), 4) }
}

/// Capture interaction mode, as `cuStreamBeginCapture` takes it. The trait's `begin_capture`
/// has no mode argument, so each backend carries one (see `BackendConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum CaptureMode {
    /// Unsafe calls (host syncs, allocations) are refused on every thread while the capture
    /// runs: the driver's default, and the strictest.
    Global,
    /// Unsafe calls are refused only on the thread that began the capture.
    ThreadLocal,
    /// Nothing is refused for being unsafe; the capture still refuses what it cannot hold.
    Relaxed,
}

impl CaptureMode {
    /// Every mode, for tests and probes that walk the rule table.
    pub const ALL: [CaptureMode; 3] = [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ];

    /// The mode as reports and flags spell it: "global", "thread-local", "relaxed".
    pub fn name(self) -> &'static str {
        match self {
            CaptureMode::Global => "global",
            CaptureMode::ThreadLocal => "thread-local",
            CaptureMode::Relaxed => "relaxed",
        }
    }
}

/// Whether a created stream synchronises with the legacy NULL stream (`CU_STREAM_DEFAULT`) or
/// not (`CU_STREAM_NON_BLOCKING`). It decides which legacy-stream calls break a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum StreamKind {
    /// Created with `CU_STREAM_DEFAULT`: orders against the legacy stream's work, both ways.
    Blocking,
    /// Created with `CU_STREAM_NON_BLOCKING`: runs beside the legacy stream's work.
    NonBlocking,
}

impl StreamKind {
    /// Both kinds, for tests and probes that walk the rule table.
    pub const ALL: [StreamKind; 2] = [StreamKind::Blocking, StreamKind::NonBlocking];

    /// The kind as reports and flags spell it: "blocking", "non-blocking".
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Blocking => "blocking",
            StreamKind::NonBlocking => "non-blocking",
        }
    }
}

/// The legacy NULL stream. Every stream argument accepts it; `begin_capture` refuses it.
pub const LEGACY_STREAM: u64 = 0;

/// A call site, as `#[track_caller]` delivers it.
pub type Site = &'static std::panic::Location<'static>;

/// `file:line:col`, the one spelling every report uses.
pub fn site_string(site: Site) -> String {
    format!("{}:{}:{}", site.file(), site.line(), site.column())
}
