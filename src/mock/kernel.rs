//! CPU kernels for the mock: a registered kernel may carry a body that reads and writes mock
//! device memory through bounds-checked accessors, so a kernel that overruns its output is
//! caught at the exact write.

use super::error::MockError;
use super::memory::Memory;
use crate::backend::{DevicePtr, HostCtx, HostFault, KernelInfo, Site};
use std::sync::Arc;

/// A CPU implementation of a kernel (the backend-neutral body type: see `backend::module`).
pub type KernelBody = crate::backend::HostBody;

pub(crate) struct MockKernel {
    pub info: Arc<KernelInfo>,
    pub body: Option<KernelBody>,
}

/// What a CPU kernel sees on the mock: its launch shape, its raw argument bytes, and mock
/// device memory, every access bounds-checked with the site of the launch.
pub struct KernelCtx<'a> {
    pub(crate) mem: &'a mut Memory,
    pub(crate) args: &'a [Vec<u8>],
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub(crate) site: Site,
    pub(crate) name: &'a str,
}

impl HostCtx for KernelCtx<'_> {
    fn kernel_name(&self) -> &str {
        self.name
    }

    fn grid(&self) -> [u32; 3] {
        self.grid
    }

    fn block(&self) -> [u32; 3] {
        self.block
    }

    fn arg(&self, i: usize, n: usize) -> Result<&[u8], HostFault> {
        match self.args.get(i) {
            Some(a) if a.len() >= n => Ok(&a[..n]),
            _ => Err(self.bad_args_text(format!("argument {i} is not {n} bytes wide"))),
        }
    }

    fn read(&self, ptr: DevicePtr, len: usize) -> Result<&[u8], HostFault> {
        Ok(self.mem.read(ptr.0, len, "kernel read", self.site)?)
    }

    fn write_slice(&mut self, ptr: DevicePtr, len: usize) -> Result<&mut [u8], HostFault> {
        Ok(self.mem.write(ptr.0, len, "kernel write", self.site)?)
    }

    fn bad_args_text(&self, detail: String) -> HostFault {
        MockError::BadParams {
            kernel: self.name.to_string(),
            site: self.site,
            detail,
        }
        .into()
    }

    fn waits_forever_text(&self, what: String) -> HostFault {
        MockError::Hang {
            kernel: self.name.to_string(),
            site: self.site,
            what,
        }
        .into()
    }

    fn assert_failed_text(&self, text: String) -> HostFault {
        MockError::DeviceAssert {
            kernel: self.name.to_string(),
            site: self.site,
            text,
        }
        .into()
    }
}

/// A body's fault as the mock's own error: what its context raised comes back as it was; a
/// body that made its own error (an engine's body, say) is a bad-parameters error with its
/// text.
pub(crate) fn fault_to_mock(f: HostFault, kernel: &str, site: Site) -> MockError {
    f.downcast::<MockError>()
        .unwrap_or_else(|other| MockError::BadParams {
            kernel: kernel.to_string(),
            site,
            detail: other.to_string(),
        })
}
