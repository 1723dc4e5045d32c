//! Element types of Triton kernels, from Triton's own cache. A Triton kernel's name says
//! nothing of its types (`triton_poi_fused_add_log_mul_0`) and its PTX parameters are untyped
//! addresses, so `--check-finite` could check none of a `torch.compile`d program's kernels.
//! Triton keeps, beside each cubin it compiled, the kernel's TTIR, whose function signature
//! types every pointer (`%arg0: !tt.ptr<f32>`). When a recording is converted on the machine
//! that made it, each kernel of a cubin module is looked for in that cache by name, matched
//! byte for byte against the module image the program loaded, and its float pointers' element
//! types are kept in the trace (`Frame::KernelElems`), as a kernel's owner would declare them.
//!
//! The caches searched are Triton's (`TRITON_CACHE_DIR`, else `~/.triton/cache`) and
//! Inductor's (`cache_dirs`); a kernel found in none keeps no types (the `--dtype` rules and
//! the types a replay infers from the bytes it wrote still apply). Parameters Triton appends at
//! launch (its scratch pointers) follow the TTIR's and stay untyped.

use std::path::{Path, PathBuf};

use crate::backend::ElemType;
use crate::trace::Trace;

/// Where Triton keeps what it compiled: `TRITON_CACHE_DIR`, else `~/.triton/cache` (Triton's
/// own rule); and where `torch.compile` points it, which the converter cannot see (Inductor
/// sets `TRITON_CACHE_DIR` inside the program): `TORCHINDUCTOR_CACHE_DIR`, else every
/// `$TMPDIR/torchinductor_*` (Inductor's default names one per user), each's `triton/<device>`.
pub fn cache_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TRITON_CACHE_DIR") {
        out.push(PathBuf::from(d));
    }
    if let Some(h) = std::env::var_os("HOME") {
        out.push(Path::new(&h).join(".triton/cache"));
    }
    // Inductor's default is `torchinductor_<user>` in the temporary directory; the user's name
    // is not always in the environment (a container's root), so every such directory is read:
    // a cubin is only taken when its bytes are the module's.
    let roots: Vec<PathBuf> = match std::env::var_os("TORCHINDUCTOR_CACHE_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => std::fs::read_dir(std::env::temp_dir())
            .map(|dir| {
                dir.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("torchinductor_"))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    for root in roots {
        if let Ok(devices) = std::fs::read_dir(root.join("triton")) {
            let mut devices: Vec<PathBuf> = devices.flatten().map(|e| e.path()).collect();
            devices.sort();
            out.extend(devices);
        }
    }
    out
}

/// Types the kernels of `t` whose module image Triton compiled, from the cache at `cache`;
/// how many kernels got types.
pub fn type_kernels(t: &mut Trace, cache: &Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(cache) else {
        return 0;
    };
    let dirs: Vec<PathBuf> = dirs.flatten().map(|e| e.path()).collect();
    let mut typed = 0;
    let ids: Vec<_> = t.kernels.keys().copied().collect();
    for id in ids {
        let info = &t.kernels[&id];
        if !info.elems.is_empty() || !info.module.starts_with("cubin-") {
            continue;
        }
        let Some(image) = t.module_images.get(&info.module).and_then(|b| t.blob(*b)) else {
            continue;
        };
        let name = info.name.clone();
        // A name that could leave the cache directory is no Triton kernel's.
        if name.is_empty() || name.contains(['/', '\0']) || name.starts_with('.') {
            continue;
        }
        let Some(ttir) = dirs.iter().find_map(|d| {
            let path = d.join(format!("{name}.cubin"));
            // Sizes first: a cache holds many compiles of a kernel, read only the one that
            // could be this.
            if std::fs::metadata(&path).ok()?.len() != image.len() as u64 {
                return None;
            }
            let cubin = std::fs::read(&path).ok()?;
            if cubin != image {
                return None;
            }
            std::fs::read_to_string(d.join(format!("{name}.ttir"))).ok()
        }) else {
            continue;
        };
        let Some(elems) = signature(&ttir, &name) else {
            continue;
        };
        if elems.iter().any(Option::is_some) {
            if let Some(info) = t.kernels.get_mut(&id) {
                info.elems = elems;
                typed += 1;
            }
        }
    }
    typed
}

/// The element type of each float pointer parameter of function `name` in TTIR text, in
/// order (`None` for scalars and other pointers); `None` when the function is not there.
pub fn signature(ttir: &str, name: &str) -> Option<Vec<Option<ElemType>>> {
    let head = format!("@{name}(");
    let at = ttir.find(&head)? + head.len();
    let rest = &ttir[at..];
    // The parameter list ends at the `)` that closes the one `@name(` opened.
    let mut depth = 0i32;
    let mut end = None;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' if depth == 0 => {
                end = Some(i);
                break;
            }
            ')' | '>' | '}' | ']' => depth -= 1,
            _ => {}
        }
    }
    let list = &rest[..end?];
    let mut params = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in list.char_indices() {
        match ch {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                params.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        params.push(&list[start..]);
    }
    Some(
        params
            .iter()
            .map(|p| {
                let ty = p.split_once(':')?.1.trim_start();
                let elem = ty.strip_prefix("!tt.ptr<")?;
                let elem = elem.split(['>', ',']).next()?.trim();
                match elem {
                    "f32" => Some(ElemType::F32),
                    "f16" => Some(ElemType::F16),
                    "bf16" => Some(ElemType::Bf16),
                    _ => None,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttir_signature_types_each_float_pointer() {
        let ttir = "module {\n  tt.func public @triton_poi_fused_add_log_mul_0(%arg0: \
                    !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(\"x\"(#loc)), %in_ptr1: \
                    !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %arg2: !tt.ptr<i64>, %arg3: \
                    !tt.ptr<f16>, %arg4: i32 {tt.divisibility = 16 : i32}, %arg5: f32) \
                    attributes {noinline = false} {\n    tt.return\n  }\n}";
        assert_eq!(
            signature(ttir, "triton_poi_fused_add_log_mul_0"),
            Some(vec![
                Some(ElemType::F32),
                Some(ElemType::Bf16),
                None,
                Some(ElemType::F16),
                None,
                None
            ])
        );
        assert_eq!(signature(ttir, "another_kernel"), None);
        assert_eq!(signature("tt.func public @k() {", "k"), Some(vec![]));
    }
}
