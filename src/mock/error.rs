//! The mock's errors. Each one names the call site and, where there is one, the allocation
//! involved, because the mock's job in a test is to say exactly what went wrong and where.

use crate::backend::{cuda_error_name, CallKind, Site};
use std::fmt;

/// An allocation, as an error message describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocDesc {
    pub base: u64,
    pub size: usize,
    /// Creation index (0 = first allocation of this backend).
    pub index: usize,
    pub site: Site,
}

impl fmt::Display for AllocDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocation #{} [{:#x}, +{} bytes) from {}",
            self.index,
            self.base,
            self.size,
            S(self.site)
        )
    }
}

/// Site display: `file:line:col`.
pub struct S<'a>(pub &'a std::panic::Location<'static>);

impl fmt::Display for S<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.0.file(), self.0.line(), self.0.column())
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum MockError {
    #[error("{op} at {site}: [{ptr:#x}, +{len}) is out of bounds of {alloc} (overruns by {over} bytes)", site = S(site))]
    OutOfBounds {
        op: &'static str,
        site: Site,
        ptr: u64,
        len: usize,
        over: usize,
        alloc: AllocDesc,
    },
    #[error("{op} at {site}: {ptr:#x} is in {alloc}, which was freed at {freed_at}", site = S(site), freed_at = S(freed_at))]
    UseAfterFree {
        op: &'static str,
        site: Site,
        ptr: u64,
        alloc: AllocDesc,
        freed_at: Site,
    },
    #[error("free at {site}: {ptr:#x} was already freed at {freed_at} ({alloc})", site = S(site), freed_at = S(freed_at))]
    DoubleFree {
        site: Site,
        ptr: u64,
        alloc: AllocDesc,
        freed_at: Site,
    },
    #[error("free at {site}: {ptr:#x} is inside {alloc}, not its base", site = S(site))]
    FreeInterior {
        site: Site,
        ptr: u64,
        alloc: AllocDesc,
    },
    #[error("{op} at {site}: {ptr:#x} points into no allocation", site = S(site))]
    WildPointer {
        op: &'static str,
        site: Site,
        ptr: u64,
    },
    #[error("{op} at {site}: out of memory: asked for {requested} bytes with {live} of {limit} in use", site = S(site))]
    OutOfMemory {
        op: &'static str,
        site: Site,
        requested: usize,
        live: usize,
        limit: usize,
    },
    /// The mock's own limit allowed the allocation, but the host could not back it (an
    /// address-space limit, a machine without the memory): an error, never an abort.
    #[error("{op} at {site}: the host could not back {requested} bytes of mock device memory", site = S(site))]
    HostOutOfMemory {
        op: &'static str,
        site: Site,
        requested: usize,
    },
    #[error("{} at {site}: injected failure (call #{n} of this kind)", kind.name(), site = S(site))]
    Injected {
        kind: CallKind,
        n: usize,
        site: Site,
    },
    #[error("kernel at {site}: no kernel {module}::{func} is registered", site = S(site))]
    UnknownKernel {
        module: String,
        func: String,
        site: Site,
    },
    #[error("{op} at {site}: kernel handle {handle} was not issued by this backend", site = S(site))]
    BadKernelHandle {
        op: &'static str,
        site: Site,
        handle: u64,
    },
    /// A CPU body's `assert` failed, as a kernel's device-side `assert` does on CUDA: raised
    /// by the launch, reported by the next call that waits, the context dead after.
    #[error("device-side assert in {kernel} (launched at {site}): Assertion `{text}` failed", site = S(site))]
    DeviceAssert {
        kernel: String,
        site: Site,
        text: String,
    },
    /// A CPU body waits for something that never comes (`HostCtx::waits_forever_text`): the
    /// launch's work never finishes, and the next call that waits for it never returns.
    #[error("{kernel} (launched at {site}) never finishes: {what}", site = S(site))]
    Hang {
        kernel: String,
        site: Site,
        what: String,
    },
    #[error("launch of {kernel} at {site}: {detail}", site = S(site))]
    BadParams {
        kernel: String,
        site: Site,
        detail: String,
    },
    #[error("{op} at {site}: unknown {what} {id}", site = S(site))]
    UnknownHandle {
        op: &'static str,
        what: &'static str,
        id: u64,
        site: Site,
    },
    #[error("{op} at {site}: {name} ({code}) by capture rule `{rule}`: {why}", site = S(site), name = cuda_error_name(*code))]
    Capture {
        op: &'static str,
        site: Site,
        code: u32,
        rule: &'static str,
        why: &'static str,
    },
    #[error("{op} at {site}: {detail}", site = S(site))]
    Invalid {
        op: &'static str,
        site: Site,
        detail: String,
    },
    #[error("kernel {kernel} launched at {site}: {cause}", site = S(site))]
    InKernel {
        kernel: String,
        site: Site,
        cause: Box<MockError>,
    },
    /// A call after a kernel faulted asynchronously: the context is dead, as CUDA's is after an
    /// illegal address. `first` is the fault; `observed` says whether this call is the first
    /// to wait for it (CUDA reports such a fault at the next call that waits).
    #[error("{op} at {site}: {}{first}", if *observed { "the device faulted before this call waited: " } else { "the context is unusable after an earlier fault: " }, site = S(site))]
    Sticky {
        op: &'static str,
        site: Site,
        observed: bool,
        first: Box<MockError>,
    },
}

impl MockError {
    /// The CUDA driver code this error stands for, so a trace records mock and driver failures
    /// alike. Sanitizer findings the driver has no code for map to what CUDA would most likely
    /// report (an illegal address for a kernel, an invalid value for a copy).
    pub fn cuda_code(&self) -> u32 {
        match self {
            MockError::OutOfBounds { .. }
            | MockError::UseAfterFree { .. }
            | MockError::WildPointer { .. }
            | MockError::DoubleFree { .. }
            | MockError::FreeInterior { .. }
            | MockError::BadParams { .. }
            | MockError::Invalid { .. } => 1,
            MockError::OutOfMemory { .. } | MockError::HostOutOfMemory { .. } => 2,
            MockError::Injected { .. } => 999,
            MockError::DeviceAssert { .. } => crate::backend::CUDA_ERROR_ASSERT,
            // Never reported: the call that would see it never returns.
            MockError::Hang { .. } => 999,
            MockError::UnknownKernel { .. } => 500,
            MockError::BadKernelHandle { .. } | MockError::UnknownHandle { .. } => 400,
            MockError::Capture { code, .. } => *code,
            MockError::Sticky { first, .. } => first.cuda_code(),
            MockError::InKernel { cause, .. } => match **cause {
                MockError::OutOfBounds { .. }
                | MockError::UseAfterFree { .. }
                | MockError::WildPointer { .. } => 700,
                ref e => e.cuda_code(),
            },
        }
    }
}

impl MockError {
    /// A kernel that never finishes (`MockError::Hang`), however wrapped.
    pub(crate) fn is_hang(&self) -> bool {
        match self {
            MockError::Hang { .. } => true,
            MockError::InKernel { cause, .. } => cause.is_hang(),
            _ => false,
        }
    }

    /// The allocation a kernel fault was about, as the backend layer reports it.
    fn fault_alloc(&self) -> Option<crate::backend::FaultAlloc> {
        match self {
            MockError::InKernel { cause, .. } => cause.fault_alloc(),
            MockError::Sticky { first, .. } => first.fault_alloc(),
            MockError::OutOfBounds { alloc, over, .. } => Some(crate::backend::FaultAlloc {
                base: alloc.base,
                bytes: alloc.size as u64,
                past_end: *over as u64,
                what: "out of bounds",
            }),
            MockError::UseAfterFree { alloc, .. } => Some(crate::backend::FaultAlloc {
                base: alloc.base,
                bytes: alloc.size as u64,
                past_end: 0,
                what: "use after free",
            }),
            _ => None,
        }
    }

    /// The faulting access in words: read or write, and a pointer into no allocation.
    fn fault_access(&self) -> Option<String> {
        let verb = |op: &str| {
            if op.contains("read") {
                "a read"
            } else if op.contains("write") {
                "a write"
            } else {
                "an access"
            }
        };
        match self {
            MockError::InKernel { cause, .. } => cause.fault_access(),
            MockError::Sticky { first, .. } => first.fault_access(),
            MockError::WildPointer { op, ptr, .. } => Some(format!(
                "{} of {ptr:#x}, which points into no allocation",
                verb(op)
            )),
            MockError::OutOfBounds { op, .. } | MockError::UseAfterFree { op, .. } => {
                Some(verb(op).to_string())
            }
            _ => None,
        }
    }

    fn fault_kernel(&self) -> Option<String> {
        match self {
            MockError::InKernel { kernel, .. } => Some(kernel.clone()),
            MockError::Sticky { first, .. } => first.fault_kernel(),
            _ => None,
        }
    }
}

impl From<MockError> for crate::backend::DeviceError {
    fn from(e: MockError) -> Self {
        let (code, kernel, alloc) = (e.cuda_code(), e.fault_kernel(), e.fault_alloc());
        let access = e.fault_access();
        crate::backend::DeviceError::wrap(code, e)
            .with_kernel(kernel)
            .with_alloc(alloc)
            .with_access(access)
    }
}
