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
    /// Nobody declared it: a driver-reported layout alone. A buffer passed there is taken as
    /// read and written.
    Unknown,
    /// A plain value (scalar or by-value struct), never a pointer.
    Value,
    /// A pointer the kernel reads through and never writes.
    Read,
    /// A pointer the kernel writes through and does not read.
    Write,
    /// A pointer the kernel both reads and writes through.
    ReadWrite,
}

impl ParamAccess {
    /// Declared a pointer (`Read`, `Write`, `ReadWrite`); `Unknown` is not.
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
    /// Bytes from the start of the packed parameter buffer.
    pub offset: u32,
    /// Bytes the parameter takes: 8 for a pointer, 128 for a tensor map.
    pub size: u32,
    /// How the kernel uses it, as its owner declared.
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

/// What a pointer parameter points at, where its owner says (`KernelDesc::with_elems`) or its
/// C signature does. The finite-value check (`replay --check-finite`) and `inspect` read
/// buffers as these; a kernel's `unsigned short*` is not assumed to be bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ElemType {
    /// IEEE binary32, 4 bytes.
    F32,
    /// IEEE binary16, 2 bytes.
    F16,
    /// bfloat16 (binary32's top half), 2 bytes.
    Bf16,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::Bf16 => 2,
        }
    }

    /// The name the command line and reports use (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
        }
    }

    /// The element in the first `size()` little-endian bytes of `b`, as f64 (exact for all
    /// three types), and its bit pattern. `None` when `b` is shorter than one element.
    pub fn decode(self, b: &[u8]) -> Option<(f64, u32)> {
        Some(match self {
            ElemType::F32 => {
                let x = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
                (f32::from_bits(x) as f64, x)
            }
            ElemType::Bf16 => {
                let x = u16::from_le_bytes(b.get(..2)?.try_into().ok()?);
                (f32::from_bits((x as u32) << 16) as f64, x as u32)
            }
            ElemType::F16 => {
                let x = u16::from_le_bytes(b.get(..2)?.try_into().ok()?);
                (half::f16::from_bits(x).to_f64(), x as u32)
            }
        })
    }

    /// Parse `f32`/`float`, `f16`/`half`, `bf16`/`bfloat16`.
    pub fn parse(s: &str) -> Option<ElemType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" => Some(ElemType::F32),
            "f16" | "half" | "float16" => Some(ElemType::F16),
            "bf16" | "bfloat16" => Some(ElemType::Bf16),
            _ => None,
        }
    }
}

/// A kernel as the registry knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The module it was loaded from.
    pub module: String,
    /// Its name in the module, as looked up.
    pub name: String,
    /// Its parameter layout: offsets and sizes from the backend, access from the owner's
    /// declaration (`Unknown` where none).
    pub params: Vec<ParamInfo>,
    /// Element type per parameter, where the kernel's owner declared one (empty: none
    /// declared). Kept out of the `Kernel` frame's encoding, which older readers know; a trace
    /// carries it in its own frame (`Frame::KernelElems`).
    #[serde(skip)]
    pub elems: Vec<Option<ElemType>>,
}

/// A module's code. Either form may be absent: the mock's CPU twins have neither, a PTX-only
/// module has no source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleCode {
    /// The module's name, as kernels are looked up under it.
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
    /// Access modes the kernels' owner declared (`declare_access`), by (module, kernel).
    declared: HashMap<(String, String), Vec<ParamInfo>>,
    /// Element types the kernels' owner declared (`declare_module`), by (module, kernel).
    declared_elems: HashMap<(String, String), Vec<Option<ElemType>>>,
    audit: KernelAudit,
}

/// One kernel lookup the audit saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelLookup {
    /// The module asked for.
    pub module: String,
    /// The kernel asked for in it.
    pub func: String,
    /// The caller's `file:line:col`.
    pub site: String,
    /// Why it did not resolve; `None` when it did.
    pub error: Option<String>,
}

/// What a run (one model's load and use) asked of the kernel registry: the modules it loaded
/// and each kernel it looked up, so a model that asks for a kernel its build does not ship is
/// named with the line that asked, and a second model on the same backend does not inherit
/// the first one's entries (`begin_run`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelAudit {
    /// Modules loaded since the run began, in load order.
    pub modules: Vec<String>,
    /// Each (module, kernel) the backend resolved since the run began, with the first site
    /// that asked (a lookup a backend answers from its own cache, for a kernel an earlier run
    /// resolved, is not seen).
    pub resolved: Vec<KernelLookup>,
    /// Every lookup that did not resolve, in order.
    pub unresolved: Vec<KernelLookup>,
}

impl KernelAudit {
    /// One line, then one per unresolved lookup.
    pub fn render(&self) -> String {
        let mut s = format!(
            "kernel audit: {} module(s) loaded, {} kernel(s) resolved, {} lookup(s) unresolved\n",
            self.modules.len(),
            self.resolved.len(),
            self.unresolved.len()
        );
        for u in &self.unresolved {
            s.push_str(&format!(
                "  unresolved: {}::{} looked up at {}: {}\n",
                u.module,
                u.func,
                u.site,
                u.error.as_deref().unwrap_or("?")
            ));
        }
        s
    }
}

/// Fill a layout's unknown access modes from a declaration of the same length; a declaration
/// that does not fit the layout is ignored (and said so), never guessed into place.
fn apply_declared(info: &mut KernelInfo, declared: &[ParamInfo]) {
    let params = &mut info.params;
    if params.len() != declared.len() {
        tracing::warn!(
            "kernel {}::{}: {} access modes declared for {} parameters; ignored",
            info.module,
            info.name,
            declared.len(),
            params.len()
        );
        return;
    }
    for (p, d) in params.iter_mut().zip(declared) {
        if p.access == ParamAccess::Unknown {
            p.access = d.access;
        }
    }
}

/// A backend's loaded modules. One per backend (per model), shared by `Arc`.
#[derive(Default)]
pub struct KernelRegistry {
    inner: RwLock<Inner>,
}

impl KernelRegistry {
    /// An empty registry, its audit empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new run (a model's load) begins: the audit forgets what earlier runs looked up.
    /// Call it before the run's first module load or kernel lookup.
    pub fn begin_run(&self) {
        self.inner.write().audit = KernelAudit::default();
    }

    /// Note a kernel lookup (backends call this on every lookup that is not a cache hit).
    pub fn note_lookup(&self, module: &str, func: &str, site: String, error: Option<String>) {
        let mut g = self.inner.write();
        let l = KernelLookup {
            module: module.to_string(),
            func: func.to_string(),
            site,
            error,
        };
        let a = &mut g.audit;
        if l.error.is_some() {
            // Bounded: a loop retrying one missing kernel keeps its first thousand.
            if a.unresolved.len() < 1000 {
                a.unresolved.push(l);
            }
        } else if !a
            .resolved
            .iter()
            .any(|r| r.module == l.module && r.func == l.func)
        {
            a.resolved.push(l);
        }
    }

    /// What this run loaded and looked up.
    pub fn audit(&self) -> KernelAudit {
        self.inner.read().audit.clone()
    }

    /// Add (or replace) a module's code.
    pub fn add_module(&self, code: ModuleCode) {
        let mut g = self.inner.write();
        if !g.audit.modules.contains(&code.name) {
            g.audit.modules.push(code.name.clone());
        }
        if let Some(m) = g.modules.iter_mut().find(|m| m.name == code.name) {
            *m = code;
        } else {
            g.modules.push(code);
        }
    }

    /// Declare a kernel's layout, and the handle its backend issued for it.
    pub fn add_kernel(&self, handle: KernelHandle, mut info: KernelInfo) {
        let mut g = self.inner.write();
        let key = (info.module.clone(), info.name.clone());
        if let Some(layout) = g.declared.get(&key) {
            apply_declared(&mut info, layout);
        }
        if let Some(elems) = g.declared_elems.get(&key) {
            info.elems = elems.clone();
        }
        g.by_name
            .insert((info.module.clone(), info.name.clone()), info.clone());
        g.by_handle.insert(handle, info);
    }

    /// What each parameter of `module::name` is (read, written, a value...), as the kernel's
    /// owner knows it (the access modes of `layout`; its offsets and sizes stay the backend's). A driver reports sizes and offsets only, so without this every parameter
    /// of a CUDA kernel is `Unknown`: traces then cannot tell a kernel's inputs from its outputs,
    /// and the analyses must assume each buffer argument is both. Fills in layouts registered
    /// before or after the declaration.
    pub fn declare_access(&self, module: &str, name: &str, layout: &[ParamInfo]) {
        let mut g = self.inner.write();
        let key = (module.to_string(), name.to_string());
        if let Some(info) = g.by_name.get_mut(&key) {
            apply_declared(info, layout);
        }
        for info in g.by_handle.values_mut() {
            if info.module == module && info.name == name {
                apply_declared(info, layout);
            }
        }
        g.declared.insert(key, layout.to_vec());
    }

    /// What a module's owner says of its kernels beyond the driver's layout: each
    /// parameter's access and, where given, its element type.
    pub fn declare_module(&self, module: &super::ModuleDesc) {
        for k in &module.kernels {
            self.declare_access(&module.name, &k.name, &k.params);
            if k.elems.is_empty() {
                continue;
            }
            let key = (module.name.clone(), k.name.clone());
            let mut g = self.inner.write();
            if let Some(info) = g.by_name.get_mut(&key) {
                info.elems = k.elems.clone();
            }
            for info in g.by_handle.values_mut() {
                if info.module == module.name && info.name == k.name {
                    info.elems = k.elems.clone();
                }
            }
            g.declared_elems.insert(key, k.elems.clone());
        }
    }

    /// The kernel a handle this backend issued stands for: how a recorder names a raw
    /// launch's kernel and reads its layout.
    pub fn kernel_by_handle(&self, handle: KernelHandle) -> Option<KernelInfo> {
        self.inner.read().by_handle.get(&handle).cloned()
    }

    /// The kernel registered as `module::name`, if looked up once.
    pub fn kernel_by_name(&self, module: &str, name: &str) -> Option<KernelInfo> {
        self.inner
            .read()
            .by_name
            .get(&(module.to_string(), name.to_string()))
            .cloned()
    }

    /// The code of the module loaded under `name`, the latest if reloaded.
    pub fn module(&self, name: &str) -> Option<ModuleCode> {
        self.inner
            .read()
            .modules
            .iter()
            .find(|m| m.name == name)
            .cloned()
    }

    /// Every module's code, in first-load order.
    pub fn modules(&self) -> Vec<ModuleCode> {
        self.inner.read().modules.clone()
    }

    /// Modules loaded, a reloaded one counted once.
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

    /// A driver's layout (sizes only) takes the owner's access modes, whether they were
    /// declared before or after the kernel was looked up; a declaration of the wrong length
    /// changes nothing.
    #[test]
    fn declared_access_fills_a_driver_layout() {
        use ParamAccess::*;
        let unknown = || ParamInfo::packed(&[(8, Unknown), (8, Unknown), (4, Unknown)]);
        let info = |name: &str| KernelInfo {
            module: "m".into(),
            name: name.into(),
            params: unknown(),
            elems: Vec::new(),
        };
        let modes = |r: &KernelRegistry, h: u64| -> Vec<ParamAccess> {
            let by_handle = r.kernel_by_handle(KernelHandle(h)).unwrap();
            let by_name = r.kernel_by_name("m", &by_handle.name).unwrap();
            assert_eq!(by_handle.params, by_name.params);
            by_handle.params.iter().map(|p| p.access).collect()
        };
        let r = KernelRegistry::new();
        let declared = |modes: &[ParamAccess]| {
            let p: Vec<(u32, ParamAccess)> = modes.iter().map(|a| (8, *a)).collect();
            ParamInfo::packed(&p)
        };
        r.declare_access("m", "before", &declared(&[Read, Write, Value]));
        r.add_kernel(KernelHandle(1), info("before"));
        r.add_kernel(KernelHandle(2), info("after"));
        r.add_kernel(KernelHandle(3), info("wrong"));
        r.declare_access("m", "after", &declared(&[Read, ReadWrite, Value]));
        r.declare_access("m", "wrong", &declared(&[Read, Write]));
        assert_eq!(modes(&r, 1), [Read, Write, Value]);
        assert_eq!(modes(&r, 2), [Read, ReadWrite, Value]);
        assert_eq!(modes(&r, 3), [Unknown, Unknown, Unknown]);
        // Offsets and sizes are the driver's, untouched.
        let p = r.kernel_by_handle(KernelHandle(1)).unwrap().params;
        let shape: Vec<(u32, u32)> = p.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(shape, [(0, 8), (8, 8), (16, 4)]);
    }
}
