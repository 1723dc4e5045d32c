//! The CUDA driver, reached through cudarc with dynamic loading. This is the only module that
//! calls into the driver, and only through `driver.rs`: one function per entry point, each
//! `unsafe` block saying why that call is sound.

mod backend;
pub mod bench;
mod config;
mod driver;
mod error;
pub mod fault_probe;
mod launch;
mod memory;
mod module;
pub mod nccl;
mod redzone;
mod staging;
mod stream;
mod vmm;
pub mod watchdog;

pub use backend::{device_memory, polled_free_memory, CudaBackend};
pub use config::{CudaConfig, RedzoneConfig};
pub use error::CudaError;
pub use redzone::RedzoneViolation;

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
    driver::library_present()
}

/// Describe every visible device. Errors if there is no driver.
pub fn probe() -> Result<Vec<DeviceFacts>, ProbeError> {
    use driver::facts;
    if !driver_present() {
        return Err(ProbeError::NoDriver);
    }
    let d = |call| move |err| ProbeError::Driver { call, err };
    facts::init().map_err(d("cuInit"))?;
    let driver_version = facts::driver_get_version().map_err(d("cuDriverGetVersion"))?;
    let n = facts::device_get_count().map_err(d("cuDeviceGetCount"))?;
    let mut out = Vec::new();
    for ordinal in 0..n {
        let dev = facts::device_get(ordinal).map_err(d("cuDeviceGet"))?;
        let name = facts::device_get_name(dev).map_err(d("cuDeviceGetName"))?;
        let total_memory = facts::device_total_mem(dev).map_err(d("cuDeviceTotalMem"))?;
        let sms = facts::device_get_attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
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
