//! Kernels, for the mock's `GpuBackend` methods (the trait impl in `backend.rs` calls each
//! `NAME_impl` here): lookup (noted in the kernel audit), raw and typed launches checked
//! against the registered layout, module loading, and tensor maps checked against their buffer.

use super::*;

impl MockGpuBackend {
    #[track_caller]
    pub(super) fn launch_impl(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        params: &mut [*mut c_void],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Launch, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch", site))?;
        let info = st.kernels[k].info.clone();
        let layout = &info.params;
        if params.len() != layout.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: format!("{}::{}", st.kernels[k].info.module, st.kernels[k].info.name),
                site,
                detail: format!(
                    "{} params passed, kernel takes {}",
                    params.len(),
                    layout.len()
                ),
            }));
        }
        let args: Vec<Vec<u8>> = params
            .iter()
            .zip(layout.iter())
            .map(|(p, info)| {
                // SAFETY: the launch contract: params[i] points at a value of the kernel's i-th
                // parameter, whose size the registered layout gives.
                unsafe { std::slice::from_raw_parts(*p as *const u8, info.size as usize) }.to_vec()
            })
            .collect();
        mock_try!(Self::launch_args(
            &mut st, func, grid, block, stream, args, "launch", site
        ))?;
        Ok(())
    }

    #[track_caller]
    pub(super) fn launch_typed_impl(
        &self,
        func: KernelHandle,
        grid: [u32; 3],
        block: [u32; 3],
        _shared_mem: u32,
        stream: u64,
        args: &[KernelArg<'_>],
    ) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::LaunchTyped, site))?;
        let k = mock_try!(Self::kernel_index(&st, func, "launch_typed", site))?;
        let info = st.kernels[k].info.clone();
        let kname = || format!("{}::{}", info.module, info.name);
        if args.len() != info.params.len() {
            return mock_try!(Err(MockError::BadParams {
                kernel: kname(),
                site,
                detail: format!(
                    "{} args passed, kernel takes {}",
                    args.len(),
                    info.params.len()
                ),
            }));
        }
        let mut raw = Vec::with_capacity(args.len());
        for (i, (a, p)) in args.iter().zip(&info.params).enumerate() {
            let bytes = match a {
                KernelArg::Buffer(ptr) => ptr.0.to_le_bytes().to_vec(),
                KernelArg::Bytes(b) => b.to_vec(),
            };
            if bytes.len() != p.size as usize {
                return mock_try!(Err(MockError::BadParams {
                    kernel: kname(),
                    site,
                    detail: format!(
                        "argument {i} is {} bytes, the kernel's parameter is {}",
                        bytes.len(),
                        p.size
                    ),
                }));
            }
            raw.push(bytes);
        }
        mock_try!(Self::launch_args(
            &mut st,
            func,
            grid,
            block,
            stream,
            raw,
            "launch_typed",
            site
        ))
    }

    #[track_caller]
    pub(super) fn kernel_impl(
        &self,
        module: &str,
        func_name: &str,
    ) -> anyhow::Result<KernelHandle> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::Kernel, site))?;
        match st
            .kernels
            .iter()
            .position(|k| k.info.module == module && k.info.name == func_name)
        {
            Some(i) => {
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    None,
                );
                Ok(KernelHandle(i as u64 + 1))
            }
            None => {
                let e = MockError::UnknownKernel {
                    module: module.to_string(),
                    func: func_name.to_string(),
                    site,
                };
                drop(st);
                self.registry.note_lookup(
                    module,
                    func_name,
                    crate::backend::site_string(site),
                    Some(e.to_string()),
                );
                mock_try!(Err(e))
            }
        }
    }

    #[track_caller]
    pub(super) fn encode_tensor_map_impl(
        &self,
        base: DevicePtr,
        desc: &crate::backend::TensorMapDesc,
    ) -> anyhow::Result<crate::backend::TensorMapImage> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, CallKind::EncodeTensorMap, site))?;
        let invalid = |detail: String| MockError::Invalid {
            op: "encode_tensor_map",
            site,
            detail,
        };
        mock_try!(desc.validate(base.0).map_err(|e| invalid(e.to_string())))?;
        // The driver does not check that the map stays inside an allocation; the mock does,
        // so a map past its buffer is named where it is made, not where TMA reads it.
        mock_try!(st
            .mem
            .read(base.0, desc.span() as usize, "encode_tensor_map", site)
            .map(|_| ()))?;
        Ok(crate::backend::tensormap::mock_image(base.0, desc))
    }

    /// Every kernel registered with its layout and body (a kernel without one is opaque), and
    /// the module's source kept for traces.
    #[track_caller]
    pub(super) fn load_module_impl(
        &self,
        module: &crate::backend::ModuleDesc,
    ) -> anyhow::Result<()> {
        self.registry.declare_module(module);
        for k in &module.kernels {
            self.register_kernel(&module.name, &k.name, k.params.clone(), k.body.clone());
        }
        self.set_module_code(crate::backend::ModuleCode {
            name: module.name.clone(),
            source: module.source.clone(),
            ptx: None,
        });
        Ok(())
    }
}
