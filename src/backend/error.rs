//! The one device error every backend's failures travel as.
//!
//! The recorder stores a failed call's driver code, and the replayer must say which launch and
//! which allocation a fault was about, whatever backend raised it. Both read this type (found in
//! an `anyhow` chain by [`device_error`]) and never downcast a particular backend's error: the
//! mock fills in the allocation it caught, CUDA only its driver code.

use std::fmt;

/// The allocation a device fault is about, when the backend knows (the mock always does, for
/// a kernel's out-of-bounds access or use-after-free).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultAlloc {
    /// Device address of the allocation's first byte.
    pub base: u64,
    /// The allocation's size in bytes, as asked for.
    pub bytes: u64,
    /// Bytes the access ran past the allocation's end (0 for a use-after-free).
    pub past_end: u64,
    /// What happened to it: "out of bounds", "use after free".
    pub what: &'static str,
}

/// A backend's failure, with its CUDA driver code (the mock says which code each of its errors
/// stands for, so traces record mock and driver failures alike).
#[derive(Debug)]
pub struct DeviceError {
    /// The CUDA driver code (`CUresult`): what the recorder stores as the call's error and what
    /// a replay compares (`same_fault`).
    pub code: u32,
    /// The kernel a fault was raised in, when the backend knows it ("module::name").
    pub kernel: Option<String>,
    /// The allocation a fault was about, when the backend knows it (the mock does).
    pub alloc: Option<FaultAlloc>,
    /// What the faulting access was, when the backend knows ("a read", "a write of 0x...,
    /// which points into no allocation"); CUDA's 700 does not say.
    pub access: Option<Box<str>>,
    message: Box<str>,
    /// The backend's own typed error, for tests of that backend.
    inner: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl DeviceError {
    /// An error with a code and a message, and nothing known of a kernel or allocation.
    pub fn new(code: u32, message: impl Into<String>) -> Self {
        DeviceError {
            code,
            kernel: None,
            alloc: None,
            access: None,
            message: message.into().into_boxed_str(),
            inner: None,
        }
    }

    /// Wrap a backend's own error: its text becomes this error's text.
    pub fn wrap<E: std::error::Error + Send + Sync + 'static>(code: u32, inner: E) -> Self {
        DeviceError {
            code,
            kernel: None,
            alloc: None,
            access: None,
            message: inner.to_string().into_boxed_str(),
            inner: Some(Box::new(inner)),
        }
    }

    /// The kernel the fault was raised in ("module::name"), when known.
    pub fn with_kernel(mut self, kernel: Option<String>) -> Self {
        self.kernel = kernel;
        self
    }

    /// The allocation the fault was about, when known.
    pub fn with_alloc(mut self, alloc: Option<FaultAlloc>) -> Self {
        self.alloc = alloc;
        self
    }

    /// The faulting access, in words (see `access`).
    pub fn with_access(mut self, access: Option<String>) -> Self {
        self.access = access.map(String::into_boxed_str);
        self
    }

    /// Append detail to the message (the request that failed, say).
    pub fn with(mut self, detail: impl fmt::Display) -> Self {
        self.message = format!("{}: {detail}", self.message).into_boxed_str();
        self
    }

    /// The backend's own error, if it is a `T`.
    pub fn inner<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.inner.as_deref().and_then(|e| e.downcast_ref::<T>())
    }

    /// Take the backend's own error out, if it is a `T`.
    pub fn into_inner<T: std::error::Error + 'static>(self) -> Result<T, Self> {
        match self.inner {
            Some(b) if b.is::<T>() => Ok(*b.downcast::<T>().expect("checked")),
            inner => Err(DeviceError { inner, ..self }),
        }
    }

    /// Whether the CUDA context is unusable after this error.
    pub fn is_sticky(&self) -> bool {
        super::is_sticky(self.code)
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// No `source()`: the inner error's text is already this one's, and `{:#}` must not repeat it.
impl std::error::Error for DeviceError {}

/// The device error in an error chain, if any layer of it came from a backend.
pub fn device_error(e: &anyhow::Error) -> Option<&DeviceError> {
    e.chain().find_map(|c| c.downcast_ref::<DeviceError>())
}

/// The CUDA driver code behind an error, when a backend raised it.
pub fn driver_code(e: &anyhow::Error) -> Option<u32> {
    device_error(e).map(|d| d.code)
}
