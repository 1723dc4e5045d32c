//! Driver errors, with the call that failed and the driver's own name and number.

use cudarc::driver::sys::CUresult;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{call} failed: {name} ({code}){}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
pub struct CudaError {
    /// The driver entry point, e.g. `cuMemAlloc_v2`.
    pub call: &'static str,
    pub code: u32,
    pub name: String,
    pub detail: String,
}

impl CudaError {
    pub fn new(call: &'static str, r: CUresult) -> Self {
        CudaError {
            call,
            code: r as u32,
            name: format!("{r:?}"),
            detail: String::new(),
        }
    }

    pub fn with(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub fn cuda_code(&self) -> u32 {
        self.code
    }
}

/// Turn a driver status into a `Result` naming the call.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<(), CudaError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::new(call, r))
    }
}
