//! The CUDA driver, reached through cudarc with dynamic loading. This is the only module that
//! calls into the driver; every `unsafe` block says why it is sound.

mod backend;
pub mod bench;
mod error;
pub mod fault_probe;
pub mod watchdog;

pub use backend::{
    device_memory, polled_free_memory, CudaBackend, CudaConfig, RedzoneConfig, RedzoneViolation,
};
pub use error::CudaError;

use cudarc::driver::{result, sys};

/// Facts about one CUDA device, for `gputape info` and trace headers.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    pub ordinal: i32,
    pub name: String,
    pub sm_count: u32,
    pub total_memory: usize,
    pub driver_version: i32,
}

/// Why no CUDA device could be described.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no CUDA driver library (libcuda) could be loaded on this machine")]
    NoDriver,
    #[error("CUDA driver call {call} failed: {err}")]
    Driver {
        call: &'static str,
        err: result::DriverError,
    },
}

/// Whether libcuda can be loaded, asked without panicking (cudarc's lazy loader panics if it
/// is absent, so this is checked before anything else touches the driver).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library by its usual names and drops the handle;
    // no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// Describe every visible device. Errors if there is no driver.
pub fn probe() -> Result<Vec<DeviceFacts>, ProbeError> {
    if !driver_present() {
        return Err(ProbeError::NoDriver);
    }
    let d = |call| move |err| ProbeError::Driver { call, err };
    result::init().map_err(d("cuInit"))?;
    let mut driver_version = 0i32;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer; the driver is loaded
    // (checked above) and initialised.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(d("cuDriverGetVersion"))?;
    let n = result::device::get_count().map_err(d("cuDeviceGetCount"))?;
    let mut out = Vec::new();
    for ordinal in 0..n {
        let dev = result::device::get(ordinal).map_err(d("cuDeviceGet"))?;
        let name = result::device::get_name(dev).map_err(d("cuDeviceGetName"))?;
        // SAFETY: `dev` is a valid device handle returned by cuDeviceGet above.
        let total_memory =
            unsafe { result::device::total_mem(dev) }.map_err(d("cuDeviceTotalMem"))?;
        // SAFETY: as above; the attribute is a plain int query.
        let sms = unsafe {
            result::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
        }
        .map_err(d("cuDeviceGetAttribute"))?;
        out.push(DeviceFacts {
            ordinal,
            name,
            sm_count: sms as u32,
            total_memory,
            driver_version,
        });
    }
    Ok(out)
}
