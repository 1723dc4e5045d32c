//! The kernel registry: every module a backend loaded, with its bytes and each kernel's
//! parameter layout.
//!
//! It exists so that code which only sees `launch(func, .., params: &mut [*mut c_void])` can
//! still say what was passed: the raw param array carries no sizes, the layout does. It also
//! holds the module bytes so a recorder can embed exactly the code that ran.

use super::types::KernelHandle;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How a kernel uses a parameter. CUDA cannot tell us (`cuFuncGetParamInfo` gives offset and
/// size only), so driver-loaded kernels say `Unknown`; the mock's kernels declare it, and the
/// analyses treat `Unknown` pointers as read-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamAccess {
    Unknown,
    /// A plain value (scalar or by-value struct), never a pointer.
    Value,
    Read,
    Write,
    ReadWrite,
}

impl ParamAccess {
    pub fn is_pointer(self) -> bool {
        matches!(
            self,
            ParamAccess::Read | ParamAccess::Write | ParamAccess::ReadWrite
        )
    }
}

/// One parameter of a kernel: where it sits in the packed parameter buffer and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParamInfo {
    pub offset: u32,
    pub size: u32,
    pub access: ParamAccess,
}

impl ParamInfo {
    /// Lay out parameters of the given sizes with natural alignment, as nvcc does for the
    /// scalar and pointer types our kernels use.
    pub fn packed(params: &[(u32, ParamAccess)]) -> Vec<ParamInfo> {
        let mut off = 0u32;
        params
            .iter()
            .map(|&(size, access)| {
                let align = size.clamp(1, 8).next_power_of_two();
                off = off.next_multiple_of(align);
                let p = ParamInfo {
                    offset: off,
                    size,
                    access,
                };
                off += size;
                p
            })
            .collect()
    }
}

/// A kernel as the registry knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    pub module: String,
    pub name: String,
    pub params: Vec<ParamInfo>,
}

/// A module's code. Either form may be absent: the mock's CPU twins have neither, a PTX-only
/// module has no source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleCode {
    pub name: String,
    /// CUDA C source, when the module was compiled from source on this machine.
    pub source: Option<String>,
    /// PTX text, when known.
    pub ptx: Option<String>,
}

#[derive(Default)]
struct Inner {
    modules: Vec<ModuleCode>,
    by_name: HashMap<(String, String), KernelInfo>,
    by_handle: HashMap<KernelHandle, KernelInfo>,
}

/// A backend's loaded modules. One per backend (per model), shared by `Arc`.
#[derive(Default)]
pub struct KernelRegistry {
    inner: RwLock<Inner>,
}

impl KernelRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add (or replace) a module's code.
    pub fn add_module(&self, code: ModuleCode) {
        let mut g = self.inner.write();
        if let Some(m) = g.modules.iter_mut().find(|m| m.name == code.name) {
            *m = code;
        } else {
            g.modules.push(code);
        }
    }

    /// Declare a kernel's layout, and the handle its backend issued for it.
    pub fn add_kernel(&self, handle: KernelHandle, info: KernelInfo) {
        let mut g = self.inner.write();
        g.by_name
            .insert((info.module.clone(), info.name.clone()), info.clone());
        g.by_handle.insert(handle, info);
    }

    pub fn kernel_by_handle(&self, handle: KernelHandle) -> Option<KernelInfo> {
        self.inner.read().by_handle.get(&handle).cloned()
    }

    pub fn kernel_by_name(&self, module: &str, name: &str) -> Option<KernelInfo> {
        self.inner
            .read()
            .by_name
            .get(&(module.to_string(), name.to_string()))
            .cloned()
    }

    pub fn module(&self, name: &str) -> Option<ModuleCode> {
        self.inner
            .read()
            .modules
            .iter()
            .find(|m| m.name == name)
            .cloned()
    }

    pub fn modules(&self) -> Vec<ModuleCode> {
        self.inner.read().modules.clone()
    }

    pub fn module_count(&self) -> usize {
        self.inner.read().modules.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_layout_aligns_like_nvcc() {
        use ParamAccess::*;
        let l = ParamInfo::packed(&[(8, Read), (4, Value), (8, Write), (4, Value), (4, Value)]);
        let offs: Vec<u32> = l.iter().map(|p| p.offset).collect();
        assert_eq!(offs, vec![0, 8, 16, 24, 28]);
    }
}
