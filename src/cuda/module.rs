//! Kernels on the driver: NVRTC compilation, PTX modules, kernel lookup with the driver's
//! parameter layouts, and programmatic dependent launch (which kernels wait on their grid, and
//! `cuLaunchKernelEx` for them). Its own room because it is everything between kernel source
//! and a launchable `CUfunction`, and none of the memory bookkeeping.

use super::backend::CudaBackend;
use super::driver::{self, st};
use crate::backend::{
    KernelHandle, KernelInfo, ModuleCode, ModuleDesc, ParamAccess, ParamInfo, Site,
};
use anyhow::Result;
use cudarc::driver::sys;
use std::ffi::{c_void, CString};

impl CudaBackend {
    /// Load a module from PTX text. `source` is kept with it when known, so a recorder can
    /// embed the code that ran.
    pub fn load_ptx(&self, name: &str, ptx: &str, source: Option<&str>) -> Result<()> {
        // A trace is untrusted: text posing as a binary image would be read by the lengths in
        // a header it does not have. PTX is text, and text is all this takes.
        if ptx.as_bytes().starts_with(b"\x7fELF") {
            anyhow::bail!("the PTX of module {name} is an ELF image, not PTX text");
        }
        // The same code loaded again (a second model on this backend, say) changes nothing:
        // handles to its kernels stay what they are.
        if self
            .registry
            .module(name)
            .is_some_and(|m| m.ptx.as_deref() == Some(ptx))
        {
            return Ok(());
        }
        let c = CString::new(ptx).map_err(|_| anyhow::anyhow!("PTX of {name} contains a NUL"))?;
        // SAFETY: `c` is NUL-terminated text that does not begin with the ELF magic (checked
        // above), and a fatbin's magic is not valid UTF-8, so the driver reads it as PTX text,
        // up to its NUL, as `module_load_data` requires.
        let m = unsafe { driver::module_load_data(&c) }
            .map_err(|e| e.with(format!("module {name}")))?;
        if let Some(old) = self.modules.lock().insert(name.to_string(), m as u64) {
            // Not unloaded: a handle to one of its kernels may be held anywhere (an op cache,
            // an engine's own field), and launching a function of an unloaded module crashes
            // the process. It stays loaded, retired, until the backend drops; new lookups
            // (this backend's and its op cache's) find the new code.
            self.retired_modules.lock().push(old);
            self.op_cache.forget_module(name);
            let mut pdl = self.pdl_functions.write();
            self.functions.write().retain(|(mname, _), f| {
                let keep = mname != name;
                if !keep {
                    pdl.remove(f);
                }
                keep
            });
        }
        {
            let mut waiting = self.waiting_entries.lock();
            waiting.retain(|(mname, _)| mname != name);
            for entry in entries_waiting_on_grid(ptx) {
                waiting.insert((name.to_string(), entry.to_string()));
            }
        }
        self.registry.add_module(ModuleCode {
            name: name.to_string(),
            source: source.map(str::to_string),
            ptx: Some(ptx.to_string()),
        });
        Ok(())
    }

    /// `GpuBackend::load_module_image`: a fatbin, cubin or PTX image as a program gave it to
    /// the driver, checked first (`image_kind`: every extent its headers name lies inside it)
    /// and copied to 8-byte alignment, as the driver reads its headers in place. Names are
    /// content-derived where the driver-level recorder makes them, so a name already loaded
    /// holds this image and is kept.
    pub fn load_image(&self, name: &str, image: &[u8]) -> Result<()> {
        if self.modules.lock().contains_key(name) {
            return Ok(());
        }
        let kind = crate::backend::image::image_kind(image)
            .map_err(|e| anyhow::anyhow!("module image {name}: {e}"))?;
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..image.len()].copy_from_slice(image);
        // SAFETY: `aligned` holds the image, whose kind and extents `image_kind` checked: a
        // fatbin or cubin whose headers reach no further than these bytes, or PTX text ending
        // in a NUL inside them; it lives for the whole call.
        let m = unsafe { driver::module_load_image(&aligned) }
            .map_err(|e| e.with(format!("module image {name} ({})", kind.name())))?;
        if let Some(old) = self.modules.lock().insert(name.to_string(), m as u64) {
            self.retired_modules.lock().push(old);
        }
        self.registry.add_module(ModuleCode {
            name: name.to_string(),
            source: None,
            ptx: None,
        });
        Ok(())
    }

    /// `GpuBackend::module_global`: a loaded module's variable, by symbol.
    pub fn global(&self, module: &str, name: &str) -> Result<(crate::backend::DevicePtr, u64)> {
        let sym = CString::new(name)?;
        // Held across the lookup: a module leaves this map (and is unloaded) only under it.
        let modules = self.modules.lock();
        let Some(m) = modules.get(module).copied() else {
            anyhow::bail!("variable {module}::{name}: module {module} is not loaded");
        };
        // SAFETY: `m` is in the module map, whose lock is held, so it is loaded.
        let (p, bytes) = unsafe { driver::module_get_global(m as sys::CUmodule, &sym) }
            .map_err(|e| e.with(format!("variable {module}::{name}")))?;
        Ok((crate::backend::DevicePtr(p), bytes as u64))
    }

    /// Compile CUDA C with NVRTC for this device and load it. FMA contraction is off, so the
    /// kernels do the same roundings as their CPU twins on the mock.
    pub fn load_source(&self, name: &str, source: &str) -> Result<()> {
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!(
                "--gpu-architecture=compute_{}{}",
                self.compute_capability.0, self.compute_capability.1
            )],
            name: Some(format!("{name}.cu")),
            fmad: Some(false),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts)
            .map_err(|e| anyhow::anyhow!("NVRTC could not compile module {name}: {e:?}"))?;
        self.load_ptx(name, &ptx.to_src(), Some(source))
    }

    /// `GpuBackend::load_module`: compile the module's CUDA source and declare each kernel's
    /// access in the registry.
    pub(super) fn load_module_desc(&self, module: &ModuleDesc) -> Result<()> {
        let Some(src) = &module.source else {
            anyhow::bail!("module {} has no CUDA source to compile", module.name)
        };
        let loaded = self
            .registry
            .module(&module.name)
            .is_some_and(|m| m.source.as_deref() == Some(src.as_str()));
        if !loaded {
            self.load_source(&module.name, src)?;
        }
        self.registry.declare_module(module);
        Ok(())
    }

    /// `GpuBackend::kernel`, looked up from `caller`: the cached handle, or the driver's
    /// function with its parameter layout noted in the registry.
    pub(super) fn look_up_kernel(
        &self,
        module: &str,
        func_name: &str,
        caller: Site,
    ) -> Result<KernelHandle> {
        let key = (module.to_string(), func_name.to_string());
        if let Some(f) = self.functions.read().get(&key) {
            return Ok(KernelHandle(*f));
        }
        let site = crate::backend::site_string(caller);
        let unresolved = |why: String| {
            self.registry
                .note_lookup(module, func_name, site.clone(), Some(why));
        };
        // Held until the layout is read: a module is unloaded only after it leaves this map,
        // under this lock (`load_ptx` replacing it, or drop), so `m` stays loaded meanwhile.
        let modules = self.modules.lock();
        let Some(m) = modules.get(module).copied() else {
            drop(modules);
            unresolved(format!("module {module} is not loaded"));
            anyhow::bail!(
                "kernel {module}::{func_name} looked up at {site}: module {module} is not loaded"
            );
        };
        let name = CString::new(func_name)?;
        // SAFETY: `m` is in the module map, whose lock is held (above), so it is loaded.
        let f = match unsafe { driver::module_get_function(m as sys::CUmodule, &name) } {
            Ok(f) => f,
            Err(e) => {
                drop(modules);
                unresolved(format!("module {module} has no kernel {func_name} ({e})"));
                return Err(e
                    .with(format!("{module}::{func_name}, looked up at {site}"))
                    .into());
            }
        };
        self.registry
            .note_lookup(module, func_name, site.clone(), None);
        let handle = KernelHandle(f as u64);
        // SAFETY: `f` was just looked up in `m`, which stays loaded while `modules` is held.
        let params = unsafe { Self::param_layout(f as u64) };
        drop(modules);
        self.word_params
            .write()
            .insert(f as u64, params.iter().map(|p| p.size == 8).collect());
        self.registry.add_kernel(
            handle,
            KernelInfo {
                module: module.to_string(),
                name: func_name.to_string(),
                params,
                elems: Vec::new(),
            },
        );
        if self.waiting_entries.lock().contains(&key) {
            self.pdl_functions.write().insert(f as u64);
        }
        self.functions.write().insert(key, f as u64);
        Ok(handle)
    }

    /// Whether `launch` starts this kernel with programmatic dependent launch (`cfg.pdl` is on
    /// and its PTX waits on its grid dependency).
    pub fn launches_programmatically(&self, k: KernelHandle) -> bool {
        self.cfg.pdl && self.pdl_functions.read().contains(&k.0)
    }

    /// (kernels `launch` starts with programmatic dependent launch, kernels looked up).
    pub fn programmatic_kernels(&self) -> (usize, usize) {
        let looked_up = self.functions.read().len();
        let pdl = if self.cfg.pdl {
            self.pdl_functions.read().len()
        } else {
            0
        };
        (pdl, looked_up)
    }

    /// `cuLaunchKernelEx` with programmatic stream serialization allowed (PDL: the kernel may
    /// begin while its predecessor in the stream runs, and waits for it in
    /// `griddepcontrol.wait`) when `how.0`, and as `how.1` says a recording launched it: in
    /// thread-block clusters (`set_kernel_cluster`), cooperatively (`set_kernel_cooperative`).
    ///
    /// # Safety
    /// As `GpuBackend::launch`: `func` is a kernel of this backend, `stream` one of its streams
    /// (or 0), and `params` points at the kernel's parameter values.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn launch_programmatic(
        &self,
        func: KernelHandle,
        how: (bool, super::backend::RecordedLaunch),
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: a plain C struct and union; all-zero is a valid value (id 0 is "ignore").
        let mut attrs: [sys::CUlaunchAttribute; 3] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        let (pdl, recorded) = how;
        if pdl {
            attrs[n].id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n].value.programmaticStreamSerializationAllowed = 1;
            n += 1;
        }
        if let Some([x, y, z]) = recorded.cluster {
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = x;
            attrs[n].value.clusterDim.y = y;
            attrs[n].value.clusterDim.z = z;
            n += 1;
        }
        if recorded.cooperative {
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            attrs[n].value.cooperative = 1;
            n += 1;
        }
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: shared_mem,
            hStream: st(stream),
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        };
        // SAFETY: `config.attrs` is the live local `attrs`, of which `numAttrs` are set; the
        // kernel, stream and params are this function's caller's obligation.
        unsafe { driver::launch_kernel_ex(&config, func.0 as sys::CUfunction, params) }?;
        Ok(())
    }

    /// Each parameter's offset and size, from the driver.
    ///
    /// # Safety
    /// `f` is a `CUfunction` of a module that stays loaded for the call.
    unsafe fn param_layout(f: u64) -> Vec<ParamInfo> {
        let mut out = Vec::new();
        for i in 0.. {
            // SAFETY: `f` is a function of a loaded module, this function's caller's
            // obligation. Past the last parameter the driver returns an error.
            let Ok((off, size)) = (unsafe { driver::func_get_param_info(f as sys::CUfunction, i) })
            else {
                break;
            };
            out.push(ParamInfo {
                offset: off as u32,
                size: size as u32,
                access: ParamAccess::Unknown,
            });
        }
        out
    }
}

/// The kernels (`.entry` names) of a PTX module whose bodies contain `griddepcontrol.wait`: the
/// ones written to be launched with programmatic dependent launch. A device function that
/// waits is inlined into its kernels at `-O3`, which is how the model's kernels get it.
pub(crate) fn entries_waiting_on_grid(ptx: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let name = after
            .split(|c: char| c == '(' || c.is_whitespace())
            .next()
            .unwrap_or("");
        let body_end = after.find(".entry ").unwrap_or(after.len());
        if after[..body_end].contains("griddepcontrol.wait") && !name.is_empty() {
            out.push(name);
        }
        rest = &after[body_end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::entries_waiting_on_grid;

    #[test]
    fn finds_the_kernels_that_wait_on_their_grid_dependency() {
        let ptx = "
.version 8.8
.target sm_90
.address_size 64
.visible .entry first(
	.param .u64 first_param_0
)
{
	griddepcontrol.launch_dependents;
	griddepcontrol.wait;
	ret;
}
.visible .entry second(
	.param .u64 second_param_0
)
{
	ret;
}
.visible .entry third()
{
	griddepcontrol.wait;
}
";
        assert_eq!(entries_waiting_on_grid(ptx), ["first", "third"]);
        assert!(entries_waiting_on_grid("").is_empty());
        assert!(entries_waiting_on_grid(".entry").is_empty());
    }
}
