//! Kernels as data: a module is its name, its CUDA C, and per kernel the parameter layout and
//! optionally a CPU body. The model and the workloads describe their kernels this way and hand
//! the description to `GpuBackend::load_module`, so they need no backend of their own: CUDA
//! compiles the source, the mock runs the bodies, and an engine's own backend may do either.
//!
//! A CPU body sees the launch through [`HostCtx`], a handful of primitives the backend that runs
//! it implements (arguments, bounds-checked reads and writes); the typed helpers twins use
//! (`ptr`, `read_f32`, ...) are built on those primitives here, once.

use super::{DevicePtr, ParamInfo, TensorMapDesc, TENSOR_MAP_BYTES};
use std::fmt;
use std::sync::Arc;

/// Why a CPU body stopped. It carries the running backend's own error unchanged (a refused
/// read or write, with the allocation it hit), so that backend can report it as its own.
pub struct HostFault(Box<dyn std::error::Error + Send + Sync + 'static>);

impl HostFault {
    /// The backend's error back, if it is a `T` (the backend that built the context asks).
    pub fn downcast<T: std::error::Error + 'static>(self) -> Result<T, HostFault> {
        match self.0.downcast::<T>() {
            Ok(t) => Ok(*t),
            Err(other) => Err(HostFault(other)),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HostFault {
    fn from(e: E) -> Self {
        HostFault(Box::new(e))
    }
}

impl fmt::Display for HostFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for HostFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What a CPU body runs against: one launch's arguments and the device memory it may touch.
/// Implemented by a backend that runs bodies; every access is checked by that backend.
pub trait HostCtx {
    /// "module::kernel", for messages.
    fn kernel_name(&self) -> &str;
    /// The launch's grid, in blocks per dimension.
    fn grid(&self) -> [u32; 3];
    /// The launch's block, in threads per dimension; twins that reduce read it, since it sets
    /// the CUDA code's order of additions.
    fn block(&self) -> [u32; 3];
    /// The first `n` bytes of argument `i`, or a fault if it is narrower.
    fn arg(&self, i: usize, n: usize) -> Result<&[u8], HostFault>;
    /// `len` bytes of device memory at `ptr`, bounds-checked.
    fn read(&self, ptr: DevicePtr, len: usize) -> Result<&[u8], HostFault>;
    /// `len` bytes of device memory at `ptr` to write, bounds-checked before anything is
    /// written.
    fn write_slice(&mut self, ptr: DevicePtr, len: usize) -> Result<&mut [u8], HostFault>;
    /// An argument the body cannot run with (a zero divisor, an overflowing size): the launch
    /// fails with it, because the bytes it would compute mean nothing.
    fn bad_args_text(&self, detail: String) -> HostFault;
    /// The body's `assert` failed (`text`: the condition). A backend that models CUDA's
    /// device-side asserts raises `CUDA_ERROR_ASSERT` (710) as CUDA does: the launch returns,
    /// the next call that waits reports it, and the context is dead after. Default: the
    /// launch fails with the text, as for bad arguments.
    fn assert_failed_text(&self, text: String) -> HostFault {
        self.bad_args_text(format!("Assertion `{text}` failed"))
    }
    /// The kernel waits for something that never comes (`what`: a flag nobody sets), as a
    /// kernel spinning on device memory does. A backend that models it leaves the launch's
    /// work unfinished forever: the next call that waits for it never returns, as on CUDA.
    /// Default: the launch fails with the text.
    fn waits_forever_text(&self, what: String) -> HostFault {
        self.bad_args_text(format!("waits forever: {what}"))
    }
}

/// A kernel's CPU body.
pub type HostBody = Arc<dyn Fn(&mut dyn HostCtx) -> Result<(), HostFault> + Send + Sync>;

/// Little-endian words from bytes. On a little-endian host this is one copy: every weight a
/// mock kernel reads comes through here, and converting element by element was most of a
/// debug-build (CI's) model step.
fn from_le<T: bytemuck::Pod, const N: usize>(b: &[u8], conv: fn([u8; N]) -> T) -> Vec<T> {
    let n = b.len() / N;
    if cfg!(target_endian = "little") {
        let mut out = vec![T::zeroed(); n];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&b[..n * N]);
        return out;
    }
    b.chunks_exact(N)
        .map(|c| conv(c.try_into().expect("chunks_exact gives N bytes")))
        .collect()
}

/// f32 values as the little-endian bytes a device buffer holds (one copy on a little-endian
/// host): weights and inputs on their way to an upload.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * 4];
    into_le(&mut out, v, f32::to_le_bytes);
    out
}

/// Values into their little-endian bytes (`dst` is exactly as long): the inverse of `from_le`.
fn into_le<T: bytemuck::Pod, const N: usize>(dst: &mut [u8], vals: &[T], conv: fn(T) -> [u8; N]) {
    if cfg!(target_endian = "little") {
        dst.copy_from_slice(bytemuck::cast_slice(vals));
        return;
    }
    for (d, v) in dst.chunks_exact_mut(N).zip(vals) {
        d.copy_from_slice(&conv(*v));
    }
}

/// The typed helpers CPU bodies are written with, over the primitives.
impl dyn HostCtx + '_ {
    /// A fault for arguments the body cannot run with (see `bad_args_text`), for `return
    /// Err(ctx.bad_args(...))`.
    pub fn bad_args(&self, detail: impl Into<String>) -> HostFault {
        self.bad_args_text(detail.into())
    }
    /// A kernel that spins until `what` happens, which never will: the body stops here and
    /// the backend models the launch as never finishing.
    pub fn waits_forever(&self, what: &str) -> HostFault {
        self.waits_forever_text(what.to_string())
    }
    /// A device-side `assert(cond)` with its condition's text: `Err` when `cond` is false, for
    /// a body to return at once (as CUDA's assert stops the thread that failed it).
    pub fn device_assert(&self, cond: bool, text: &str) -> Result<(), HostFault> {
        if cond {
            Ok(())
        } else {
            Err(self.assert_failed_text(text.to_string()))
        }
    }

    /// Argument `i` as a device address (8 bytes, little-endian).
    pub fn ptr(&self, i: usize) -> Result<DevicePtr, HostFault> {
        let b: [u8; 8] = self.arg(i, 8)?.try_into().expect("8 bytes");
        Ok(DevicePtr(u64::from_le_bytes(b)))
    }

    /// Argument `i` as a `u32` (4 bytes, little-endian).
    pub fn u32(&self, i: usize) -> Result<u32, HostFault> {
        Ok(u32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    /// Argument `i` as a `u64` (8 bytes, little-endian).
    pub fn u64(&self, i: usize) -> Result<u64, HostFault> {
        Ok(u64::from_le_bytes(self.arg(i, 8)?.try_into().expect("8")))
    }

    /// Argument `i` as an `i32` (4 bytes, little-endian).
    pub fn i32(&self, i: usize) -> Result<i32, HostFault> {
        Ok(i32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    /// Argument `i` as an `f32` (4 bytes, little-endian).
    pub fn f32(&self, i: usize) -> Result<f32, HostFault> {
        Ok(f32::from_le_bytes(self.arg(i, 4)?.try_into().expect("4")))
    }

    /// Argument `i` as a tensor map the mock encoded: the address it points at and what it
    /// describes (see `tensormap::mock_image`).
    pub fn tensor_map(&self, i: usize) -> Result<(DevicePtr, TensorMapDesc), HostFault> {
        let bytes = self.arg(i, TENSOR_MAP_BYTES)?;
        match super::tensormap::decode_mock_image(bytes) {
            Some((addr, d)) => Ok((DevicePtr(addr), d)),
            None => Err(self.bad_args(format!(
                "argument {i} is not a tensor map this backend encoded"
            ))),
        }
    }

    /// Write `bytes` at `ptr`, bounds-checked before anything is written.
    pub fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), HostFault> {
        self.write_slice(ptr, bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// Fill `len` bytes with `value`, bounds-checked like any write.
    pub fn fill(&mut self, ptr: DevicePtr, len: usize, value: u8) -> Result<(), HostFault> {
        self.write_slice(ptr, len)?.fill(value);
        Ok(())
    }

    /// `n` f32 values at `ptr`, bounds-checked.
    pub fn read_f32(&self, ptr: DevicePtr, n: usize) -> Result<Vec<f32>, HostFault> {
        let b = self.read(ptr, n.saturating_mul(4))?;
        Ok(from_le(b, f32::from_le_bytes))
    }

    /// `n` u32 values at `ptr`, bounds-checked.
    pub fn read_u32(&self, ptr: DevicePtr, n: usize) -> Result<Vec<u32>, HostFault> {
        let b = self.read(ptr, n.saturating_mul(4))?;
        Ok(from_le(b, u32::from_le_bytes))
    }

    /// 16-bit words (bf16 weights and caches, held as their bits).
    pub fn read_u16(&self, ptr: DevicePtr, n: usize) -> Result<Vec<u16>, HostFault> {
        let b = self.read(ptr, n.saturating_mul(2))?;
        Ok(from_le(b, u16::from_le_bytes))
    }

    /// Write `vals` as 16-bit words at `ptr` (bf16 or f16 bits), bounds-checked first.
    pub fn write_u16(&mut self, ptr: DevicePtr, vals: &[u16]) -> Result<(), HostFault> {
        let dst = self.write_slice(ptr, vals.len().saturating_mul(2))?;
        into_le(dst, vals, u16::to_le_bytes);
        Ok(())
    }

    /// Write `vals` as f32 at `ptr`, bounds-checked first.
    pub fn write_f32(&mut self, ptr: DevicePtr, vals: &[f32]) -> Result<(), HostFault> {
        let dst = self.write_slice(ptr, vals.len() * 4)?;
        into_le(dst, vals, f32::to_le_bytes);
        Ok(())
    }

    /// Write `vals` as u32 at `ptr`, bounds-checked first.
    pub fn write_u32(&mut self, ptr: DevicePtr, vals: &[u32]) -> Result<(), HostFault> {
        let dst = self.write_slice(ptr, vals.len() * 4)?;
        into_le(dst, vals, u32::to_le_bytes);
        Ok(())
    }

    /// Write `n` copies of `v`, bounds-checked before anything is built (a planted overrun
    /// may ask for a gigabyte).
    pub fn fill_f32(&mut self, ptr: DevicePtr, n: usize, v: f32) -> Result<(), HostFault> {
        let dst = self.write_slice(ptr, n.saturating_mul(4))?;
        for d in dst.chunks_exact_mut(4) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

/// One kernel of a module: what its parameters are, and how the mock runs it.
#[derive(Clone)]
pub struct KernelDesc {
    /// The kernel's name in the source (its `extern "C"` symbol), as `GpuBackend::kernel`
    /// looks it up.
    pub name: String,
    /// Each parameter's size and access (a driver reports only sizes: the kernel's owner says
    /// which pointers are read and which written).
    pub params: Vec<ParamInfo>,
    /// A CPU body with the CUDA code's arithmetic. Without one the mock treats the kernel as
    /// opaque: launches are checked for their arguments and then do nothing.
    pub body: Option<HostBody>,
    /// Element type per parameter (`None` for values and for pointers whose type is not a
    /// float). Optional: where empty, a trace's tools read types from the C signature, which
    /// cannot say that an `unsigned short*` holds bf16.
    pub elems: Vec<Option<super::ElemType>>,
}

impl KernelDesc {
    /// A kernel with its parameters and, for the mock to run it, a CPU body; no element types
    /// (`with_elems` adds them).
    pub fn new(name: &str, params: Vec<ParamInfo>, body: Option<HostBody>) -> Self {
        KernelDesc {
            name: name.to_string(),
            params,
            body,
            elems: Vec::new(),
        }
    }

    /// The element type of each parameter, in order (`None` where it is not a float buffer).
    pub fn with_elems(mut self, elems: Vec<Option<super::ElemType>>) -> Self {
        self.elems = elems;
        self
    }
}

/// A module as data: its name, its CUDA C (what CUDA compiles and what a trace embeds), and
/// its kernels.
#[derive(Clone)]
pub struct ModuleDesc {
    /// The module's name: `GpuBackend::kernel(module, ...)` looks kernels up under it, and
    /// loading it again under the same name replaces its code.
    pub name: String,
    /// The CUDA C. `None` for a module that exists only as CPU bodies: the mock loads it,
    /// CUDA refuses.
    pub source: Option<String>,
    /// Every kernel a caller may look up in it.
    pub kernels: Vec<KernelDesc>,
}

impl fmt::Debug for ModuleDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
        f.debug_struct("ModuleDesc")
            .field("name", &self.name)
            .field("source_bytes", &self.source.as_ref().map(|s| s.len()))
            .field("kernels", &names)
            .finish()
    }
}
