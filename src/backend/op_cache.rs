//! Memoized kernel handles and scratch buffers of one backend.

use super::{DevicePtr, GpuBackend, KernelHandle, ModelResource, Releases};
use anyhow::Result;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Handles and scratch that belong to one backend's model. Living inside the backend (the
/// trait's `op_cache`) is what stops an op from caching a handle past the registry it came
/// from.
#[derive(Default)]
pub struct OpCache {
    kernels: Mutex<HashMap<(&'static str, &'static str), KernelHandle>>,
    scratch: Mutex<HashMap<&'static str, (DevicePtr, usize)>>,
}

impl OpCache {
    /// An empty cache: no handles, no scratch.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle for `module::func`, looked up through `gpu` on first use only.
    #[track_caller]
    pub fn kernel(
        &self,
        gpu: &dyn GpuBackend,
        module: &'static str,
        func: &'static str,
    ) -> Result<KernelHandle> {
        if let Some(h) = self.kernels.lock().get(&(module, func)) {
            return Ok(*h);
        }
        let h = gpu.kernel(module, func)?;
        self.kernels.lock().insert((module, func), h);
        Ok(h)
    }

    /// A scratch buffer of at least `bytes`, named `key`, reallocated (through `gpu`, so the
    /// ledger sees the caller) only when it must grow.
    #[track_caller]
    pub fn scratch(
        &self,
        gpu: &dyn GpuBackend,
        key: &'static str,
        bytes: usize,
    ) -> Result<DevicePtr> {
        let mut g = self.scratch.lock();
        if let Some(&(ptr, have)) = g.get(key) {
            if have >= bytes {
                return Ok(ptr);
            }
            gpu.free(ptr)?;
            g.remove(key);
        }
        let ptr = gpu.alloc(bytes)?;
        g.insert(key, (ptr, bytes));
        Ok(ptr)
    }

    /// Forget the handles of `module`'s kernels (the backend loaded new code under its name),
    /// so the next lookup resolves the new code.
    pub fn forget_module(&self, module: &str) {
        self.kernels.lock().retain(|(m, _), _| *m != module);
    }

    /// Scratch buffers held now: 0 after `release_scratch`.
    pub fn scratch_count(&self) -> usize {
        self.scratch.lock().len()
    }

    /// Kernel handles memoized now; `forget_module` drops a module's.
    pub fn kernel_count(&self) -> usize {
        self.kernels.lock().len()
    }

    /// Free the scratch buffers; shared-reference form, since the cache lives inside a backend
    /// that callers hold by `&`. Kernel handles stay: they die with the registry's modules.
    /// Every buffer is freed even when one fails; the failures come back as a `TeardownError`.
    #[track_caller]
    pub fn release_scratch(&self, gpu: &dyn GpuBackend) -> Result<()> {
        let drained: Vec<_> = self.scratch.lock().drain().collect();
        let mut releases = Releases::new();
        for (_, (ptr, _)) in drained {
            releases.attempt(
                "op-cache",
                format_args!("scratch buffer {ptr}"),
                gpu.free(ptr),
            );
        }
        Ok(releases.finish()?)
    }
}

impl ModelResource<dyn GpuBackend> for OpCache {
    fn label(&self) -> &'static str {
        "op-cache"
    }

    fn release(&mut self, gpu: &dyn GpuBackend) -> Result<()> {
        self.release_scratch(gpu)
    }
}
