//! Driver errors, with the call that failed and the driver's own name and number. They travel
//! as the backend layer's `DeviceError`, so nothing above `cuda/` needs to know this module.

use crate::backend::DeviceError;
use cudarc::driver::sys::CUresult;

/// A failed driver call is a [`DeviceError`] whose text names the entry point (e.g.
/// `cuMemAlloc_v2`), the driver's symbolic name and its number.
pub type CudaError = DeviceError;

/// The error for driver entry point `call` returning `r`.
pub(crate) fn driver_error(call: &'static str, r: CUresult) -> DeviceError {
    DeviceError::new(r as u32, format!("{call} failed: {r:?} ({})", r as u32))
}

/// Turn a driver status into a `Result` naming the call.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<(), DeviceError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(driver_error(call, r))
    }
}
