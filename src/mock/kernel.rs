//! CPU kernels for the mock: a registered kernel may carry a body that reads and writes mock
//! device memory through bounds-checked accessors, so a kernel that overruns its output is
//! caught at the exact write.

use super::error::MockError;
use super::memory::Memory;
use crate::backend::{DevicePtr, KernelInfo, Site};
use std::sync::Arc;

/// A CPU implementation of a kernel.
pub type KernelBody = Arc<dyn Fn(&mut KernelCtx<'_>) -> Result<(), MockError> + Send + Sync>;

pub(crate) struct MockKernel {
    pub info: Arc<KernelInfo>,
    pub body: Option<KernelBody>,
}

/// What a CPU kernel sees: its launch shape, its raw argument bytes, and device memory.
pub struct KernelCtx<'a> {
    pub(crate) mem: &'a mut Memory,
    pub(crate) args: &'a [Vec<u8>],
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub(crate) site: Site,
    pub(crate) name: &'a str,
}

impl KernelCtx<'_> {
    pub fn kernel_name(&self) -> &str {
        self.name
    }

    /// A kernel argument a CPU twin cannot run with (a zero divisor, a size that overflows):
    /// the launch fails with it, as the bytes the twin would compute have no meaning.
    pub fn bad_args(&self, detail: impl Into<String>) -> MockError {
        MockError::BadParams {
            kernel: self.name.to_string(),
            site: self.site,
            detail: detail.into(),
        }
    }

    fn arg(&self, i: usize, n: usize) -> Result<&[u8], MockError> {
        match self.args.get(i) {
            Some(a) if a.len() >= n => Ok(&a[..n]),
            _ => Err(MockError::BadParams {
                kernel: self.name.to_string(),
                site: self.site,
                detail: format!("argument {i} is not {n} bytes wide"),
            }),
        }
    }

    pub fn ptr(&self, i: usize) -> Result<DevicePtr, MockError> {
        Ok(DevicePtr(u64::from_le_bytes(
            self.arg(i, 8)?.try_into().expect("8 bytes"),
        )))
    }

    pub fn u32(&self, i: usize) -> Result<u32, MockError> {
        Ok(u32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    /// Argument `i` as a tensor map this mock encoded: the address it points at and what it
    /// describes.
    pub fn tensor_map(
        &self,
        i: usize,
    ) -> Result<(DevicePtr, crate::backend::TensorMapDesc), MockError> {
        let bytes = self.arg(i, crate::backend::TENSOR_MAP_BYTES)?;
        crate::backend::tensormap::decode_mock_image(bytes)
            .map(|(addr, d)| (DevicePtr(addr), d))
            .ok_or_else(|| {
                self.bad_args(format!(
                    "argument {i} is not a tensor map this backend encoded"
                ))
            })
    }

    pub fn i32(&self, i: usize) -> Result<i32, MockError> {
        Ok(i32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    pub fn f32(&self, i: usize) -> Result<f32, MockError> {
        Ok(f32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    pub fn read(&self, ptr: DevicePtr, len: usize) -> Result<&[u8], MockError> {
        self.mem.read(ptr.0, len, "kernel read", self.site)
    }

    pub fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), MockError> {
        self.mem
            .write(ptr.0, bytes.len(), "kernel write", self.site)?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// Fill `len` bytes with `value`, bounds-checked like any write.
    pub fn fill(&mut self, ptr: DevicePtr, len: usize, value: u8) -> Result<(), MockError> {
        self.mem
            .write(ptr.0, len, "kernel write", self.site)?
            .fill(value);
        Ok(())
    }

    pub fn read_f32(&self, ptr: DevicePtr, n: usize) -> Result<Vec<f32>, MockError> {
        Ok(self
            .read(ptr, n * 4)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    pub fn read_u32(&self, ptr: DevicePtr, n: usize) -> Result<Vec<u32>, MockError> {
        Ok(self
            .read(ptr, n * 4)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }

    pub fn write_f32(&mut self, ptr: DevicePtr, vals: &[f32]) -> Result<(), MockError> {
        let dst = self
            .mem
            .write(ptr.0, vals.len() * 4, "kernel write", self.site)?;
        for (d, v) in dst.chunks_exact_mut(4).zip(vals) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// Write `n` copies of `v`, bounds-checked before anything is built (a planted overrun
    /// may ask for a gigabyte).
    pub fn fill_f32(&mut self, ptr: DevicePtr, n: usize, v: f32) -> Result<(), MockError> {
        let len = n.saturating_mul(4);
        let dst = self.mem.write(ptr.0, len, "kernel write", self.site)?;
        for d in dst.chunks_exact_mut(4) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    pub fn write_u32(&mut self, ptr: DevicePtr, vals: &[u32]) -> Result<(), MockError> {
        let dst = self
            .mem
            .write(ptr.0, vals.len() * 4, "kernel write", self.site)?;
        for (d, v) in dst.chunks_exact_mut(4).zip(vals) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}
