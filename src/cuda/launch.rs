//! Launches, for `CudaBackend`'s `GpuBackend` methods (the trait impl in `backend.rs` calls
//! each `NAME_impl` here): raw launches (programmatic where PDL applies) noted for the fault
//! probe, typed launches packed on the stack, and TMA tensor maps through
//! `cuTensorMapEncodeTiled`. The `// SAFETY:` lines cite the trait's contract, as
//! `backend.rs`'s module docs set out.

use super::backend::CudaBackend;
use super::driver::{self, st};
use super::fault_probe;
use crate::backend::{DeviceError, DevicePtr, GpuBackend, KernelArg, KernelHandle};
use anyhow::Result;
use cudarc::driver::sys;
use smallvec::SmallVec;
use std::ffi::c_void;
use std::panic::Location;
use std::sync::atomic::Ordering;

impl CudaBackend {
    #[track_caller]
    pub(super) fn launch_impl(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        const DEFAULT_SHARED: u32 = 48 << 10;
        if shared_mem > DEFAULT_SHARED
            && self
                .smem_allowed
                .read()
                .get(&func.0)
                .is_none_or(|a| *a < shared_mem)
        {
            // SAFETY: `func` is a kernel of this backend (the trait's contract).
            unsafe { driver::func_allow_dynamic_shared(func.0 as sys::CUfunction, shared_mem) }
                .map_err(|e| self.probe(e))?;
            self.smem_allowed.write().insert(func.0, shared_mem);
        }
        let pdl = self.launches_programmatically(func);
        let recorded = self.recorded_launch.read().get(&func.0).copied();
        if pdl || recorded.is_some() {
            let how = (pdl, recorded.unwrap_or_default());
            // SAFETY: the trait's contract: `func` is a kernel of this backend, `stream` one of
            // its streams or 0, and `params[i]` points at the i-th argument's value.
            unsafe { self.launch_programmatic(func, how, grid, block, shared_mem, stream, params) }
                .map_err(|e| match e.downcast::<DeviceError>() {
                    Ok(d) => anyhow::Error::from(self.probe(d)),
                    Err(e) => e,
                })?;
        } else {
            // SAFETY: as above, the trait's contract for `func`, `stream` and `params`.
            unsafe {
                driver::launch_kernel(
                    func.0 as sys::CUfunction,
                    grid,
                    block,
                    shared_mem,
                    st(stream),
                    params,
                )
            }
            .map_err(|e| self.probe(e))?;
        }
        let mut words = SmallVec::new();
        if let Some(mask) = self.word_params.read().get(&func.0) {
            for (p, _) in params.iter().zip(mask).filter(|(_, w)| **w).take(8) {
                // SAFETY: launch's contract: params[i] points at the i-th parameter's value,
                // which the driver's layout says is 8 bytes.
                words.push(unsafe { (*p as *const u64).read_unaligned() });
            }
        }
        if self.captures.load(Ordering::Relaxed) == 0 || !self.is_capturing(stream) {
            self.in_flight.lock().push(fault_probe::Launched {
                kernel: func.0,
                graph: false,
                stream,
                site: Location::caller(),
                words,
            });
        }
        if self.cfg.debug_sync_kernels {
            self.sync_stream(stream)?;
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn launch_typed_impl(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        // Pack on the stack: every argument gets whole 8-byte slots.
        let mut slots: SmallVec<[u64; 24]> = SmallVec::new();
        let mut starts: SmallVec<[usize; 16]> = SmallVec::new();
        for a in args {
            starts.push(slots.len());
            match a {
                KernelArg::Buffer(p) => slots.push(p.0),
                KernelArg::Bytes(b) => {
                    for chunk in b.chunks(8) {
                        let mut w = [0u8; 8];
                        w[..chunk.len()].copy_from_slice(chunk);
                        slots.push(u64::from_le_bytes(w));
                    }
                    if b.is_empty() {
                        slots.push(0);
                    }
                }
            }
        }
        let base = slots.as_mut_ptr();
        let mut params: SmallVec<[*mut c_void; 16]> = starts
            .iter()
            // SAFETY: each start indexes into `slots`, which is not resized after this point.
            .map(|&i| unsafe { base.add(i) }.cast::<c_void>())
            .collect();
        self.launch(func, grid, block, shared_mem, stream, &mut params)
    }

    #[track_caller]
    pub(super) fn encode_tensor_map_impl(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> Result<crate::backend::TensorMapImage> {
        use crate::backend::TensorMapDtype as D;
        use sys::CUtensorMapDataType as T;
        let site = crate::backend::site_string(Location::caller());
        desc.validate(base.0)
            .map_err(|e| anyhow::anyhow!("encode_tensor_map at {site}: {e}"))?;
        let dtype = match desc.dtype {
            D::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            D::U16 => T::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            D::U32 => T::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            D::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
            D::U64 => T::CU_TENSOR_MAP_DATA_TYPE_UINT64,
            D::I64 => T::CU_TENSOR_MAP_DATA_TYPE_INT64,
            D::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            D::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            D::F64 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
            D::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        };
        let unsupported = |what: &str, v: u32| {
            anyhow::anyhow!("encode_tensor_map at {site}: {what} {v} is not supported here")
        };
        use sys::CUtensorMapFloatOOBfill as O;
        use sys::CUtensorMapInterleave as I;
        use sys::CUtensorMapL2promotion as L;
        use sys::CUtensorMapSwizzle as S;
        let interleave = match desc.interleave {
            0 => I::CU_TENSOR_MAP_INTERLEAVE_NONE,
            1 => I::CU_TENSOR_MAP_INTERLEAVE_16B,
            2 => I::CU_TENSOR_MAP_INTERLEAVE_32B,
            v => return Err(unsupported("interleave", v)),
        };
        let swizzle = match desc.swizzle {
            0 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            1 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            2 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            3 => S::CU_TENSOR_MAP_SWIZZLE_128B,
            v => return Err(unsupported("swizzle", v)),
        };
        let l2 = match desc.l2_promotion {
            0 => L::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            1 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
            2 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            3 => L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            v => return Err(unsupported("L2 promotion", v)),
        };
        let oob = match desc.oob_fill {
            0 => O::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            1 => O::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
            v => return Err(unsupported("out-of-bounds fill", v)),
        };
        // SAFETY: `desc.validate` passed above, so `dims`, `box_dims` and `element_strides`
        // hold `rank` entries and `strides` `rank - 1`.
        let map = unsafe {
            driver::tensor_map_encode_tiled(
                dtype,
                desc.rank() as u32,
                base.0 as *mut c_void,
                &desc.dims,
                &desc.strides,
                &desc.box_dims,
                &desc.element_strides,
                interleave,
                swizzle,
                l2,
                oob,
            )
        }
        .map_err(|e| e.with(format!("a tensor map at {site}")))?;
        let mut img = [0u8; crate::backend::TENSOR_MAP_BYTES];
        for (chunk, word) in img.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Ok(img)
    }
}
