//! What type each kernel parameter has, read from the code the trace embeds.
//!
//! A kernel's parameter layout says only offsets and sizes (all the driver knows), so a scalar
//! argument is four bytes that could be `0x3727c5ac` or `1e-5`. The trace also carries the
//! module's CUDA C source or PTX, and their signatures say which: this reads them, so `show`
//! can print `eps = 1e-5` instead of hex. Anything it cannot parse stays unknown (hex); it
//! never guesses from the bytes.

/// A kernel parameter's type, as far as rendering cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// Any `T*`: printed as the buffer it points into.
    Pointer,
    /// `__half`, `half`.
    F16,
    /// `__nv_bfloat16`, `__bf16`.
    Bf16,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// `char`, `signed char`, `int8_t`.
    I8,
    /// `unsigned char`, `uint8_t`, `bool`.
    U8,
    /// `short`, `int16_t`.
    I16,
    /// `unsigned short`, `uint16_t`.
    U16,
    /// `int`, `int32_t`.
    I32,
    /// `unsigned`, `uint32_t`.
    U32,
    /// `long long`, `long`, `int64_t`, `ptrdiff_t`.
    I64,
    /// `unsigned long long`, `unsigned long`, `uint64_t`, `size_t`.
    U64,
    /// A struct, a template parameter, or a type this parser does not know.
    Unknown,
}

impl ParamType {
    /// `bytes` as a value of this type, when the size fits; `None` otherwise.
    pub fn render(self, bytes: &[u8]) -> Option<String> {
        fn a<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
            b.try_into().ok()
        }
        Some(match self {
            ParamType::F32 => float(f32::from_le_bytes(a(bytes)?) as f64, 'f'),
            ParamType::F64 => float(f64::from_le_bytes(a(bytes)?), 'd'),
            ParamType::Bf16 => float(half::bf16::from_le_bytes(a(bytes)?).to_f64(), 'b'),
            ParamType::F16 => float(half::f16::from_le_bytes(a(bytes)?).to_f64(), 'h'),
            ParamType::I8 => i8::from_le_bytes(a(bytes)?).to_string(),
            ParamType::U8 => u8::from_le_bytes(a(bytes)?).to_string(),
            ParamType::I16 => i16::from_le_bytes(a(bytes)?).to_string(),
            ParamType::U16 => u16::from_le_bytes(a(bytes)?).to_string(),
            ParamType::I32 => i32::from_le_bytes(a(bytes)?).to_string(),
            ParamType::U32 => u32::from_le_bytes(a(bytes)?).to_string(),
            ParamType::I64 => i64::from_le_bytes(a(bytes)?).to_string(),
            ParamType::U64 => u64::from_le_bytes(a(bytes)?).to_string(),
            ParamType::Pointer | ParamType::Unknown => return None,
        })
    }
}

/// Shortest text that reads back to the same value, with a C-like suffix naming the width
/// (`f` float, `d` double, `h` half, `b` bfloat16), so `1` the float is not `1` the int.
fn float(v: f64, suffix: char) -> String {
    let body = match suffix {
        'd' => format!("{v:?}"),
        _ => format!("{:?}", v as f32),
    };
    format!("{body}{suffix}")
}

/// The parameter types of `kernel`, from CUDA C source or, failing that, PTX.
pub fn param_types(
    source: Option<&str>,
    ptx: Option<&str>,
    kernel: &str,
) -> Option<Vec<ParamType>> {
    source
        .and_then(|s| from_c(s, kernel))
        .or_else(|| ptx.and_then(|p| from_ptx(p, kernel)))
}

/// The parameter declarations of `__global__ ... kernel(...)` in C source, split at top-level
/// commas.
fn c_params<'a>(src: &'a str, kernel: &str) -> Option<Vec<&'a str>> {
    // A hostile trace may name a kernel "": it would be found everywhere, and never passed.
    if kernel.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(at) = src[from..].find(kernel).map(|i| i + from) {
        from = at + kernel.len();
        let before = &src[..at];
        let after = src[from..].trim_start();
        let whole_word = !before.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        // The cheap tests first: a source full of the name must not make this quadratic.
        if !whole_word || !after.starts_with('(') {
            continue;
        }
        // A definition or declaration: `__global__` since the last statement ends.
        let decl_start = before.rfind([';', '}', '{']).map_or(0, |i| i + 1);
        if !before[decl_start..].contains("__global__") {
            continue;
        }
        return balanced(&after[1..]).map(split_top);
    }
    None
}

/// The signature of `__global__ ... kernel(...)` in C source.
pub fn from_c(src: &str, kernel: &str) -> Option<Vec<ParamType>> {
    Some(
        c_params(src, kernel)?
            .iter()
            .filter_map(|p| c_param(p))
            .collect(),
    )
}

/// A pointer parameter as its C declaration gives it: what it points at (a float type, or
/// `None`) and whether the pointee is `const` (then the kernel does not write through it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerParam {
    /// The pointee's float type (`float*`, `__half*`, `__nv_bfloat16*`); `None` for any other.
    pub elem: Option<crate::backend::ElemType>,
    /// Declared `const T*`: the kernel only reads through it.
    pub is_const: bool,
    /// The pointee may hold floats of a type the signature does not say (16-bit words,
    /// `void`, a typedef): worth a `--dtype`. Integer pointees are not.
    pub maybe_float: bool,
}

/// Each parameter of `kernel` from its C source: for a pointer, the type it points at (without
/// qualifiers) and whether that is `const`; `None` for a value.
pub fn pointees(src: &str, kernel: &str) -> Option<Vec<Option<(String, bool)>>> {
    Some(
        c_params(src, kernel)?
            .iter()
            .filter(|p| !matches!(p.trim(), "" | "void"))
            .map(|p| pointee(p.split('=').next().unwrap_or(p)))
            .collect(),
    )
}

/// One parameter's pointee (without qualifiers) and whether it is `const`; `None` for a value.
/// The pointer's `*` must end the declaration (a name after it in C source, qualifiers after
/// it in either), so a by-value template holding pointers (`Array<char*, 2>`) is a value.
fn pointee(p: &str) -> Option<(String, bool)> {
    let star = p.rfind('*')?;
    let after = p[star + 1..].split_whitespace().filter(|w| {
        !matches!(
            *w,
            "const" | "volatile" | "__restrict__" | "restrict" | "__restrict"
        )
    });
    if after.count() > 1 || p[star + 1..].contains(['<', '>']) {
        return None;
    }
    let head = p[..star].trim_end_matches('*');
    if head.contains(['<', '>']) && !head.trim_end().ends_with('>') {
        return None;
    }
    let words: Vec<&str> = head
        .split_whitespace()
        .filter(|w| !matches!(*w, "volatile" | "__restrict__" | "restrict"))
        .collect();
    let is_const = words.contains(&"const");
    let ty: Vec<&str> = words.into_iter().filter(|w| *w != "const").collect();
    Some((ty.join(" "), is_const))
}

/// Each parameter of `kernel` from its C source: `Some` for a pointer, `None` for a value.
pub fn pointer_params(src: &str, kernel: &str) -> Option<Vec<Option<PointerParam>>> {
    Some(typed_pointees(pointees(src, kernel)?))
}

/// Each parameter of a kernel from its mangled name's parameter list
/// (`demangle::params`): `Some` for a pointer, `None` for a value.
pub fn pointer_params_from_name(symbol: &str) -> Option<Vec<Option<PointerParam>>> {
    let params = super::demangle::params(symbol)?;
    Some(typed_pointees(params.iter().map(|p| pointee(p)).collect()))
}

fn typed_pointees(pointees: Vec<Option<(String, bool)>>) -> Vec<Option<PointerParam>> {
    pointees
        .into_iter()
        .map(|p| {
            let (ty, is_const) = p?;
            let t = c_type(&ty);
            let elem = match t {
                ParamType::F32 => Some(crate::backend::ElemType::F32),
                ParamType::F16 => Some(crate::backend::ElemType::F16),
                ParamType::Bf16 => Some(crate::backend::ElemType::Bf16),
                _ => None,
            };
            // 16-bit words are how half and bf16 travel without their headers; `void` and
            // unknown types could be anything.
            let maybe_float =
                elem.is_some() || matches!(t, ParamType::U16 | ParamType::I16 | ParamType::Unknown);
            Some(PointerParam {
                elem,
                is_const,
                maybe_float,
            })
        })
        .collect()
}

/// The text up to the `)` that closes an already-opened `(`.
fn balanced(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' if depth == 0 => return Some(&s[..i]),
            ')' | '>' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Split at commas outside brackets.
pub(crate) fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// One C parameter declaration; `None` for an empty list or `void`.
fn c_param(p: &str) -> Option<ParamType> {
    let p = p.split('=').next().unwrap_or(p).trim();
    if p.is_empty() || p == "void" {
        return None;
    }
    if p.contains('*') || p.contains('&') || p.contains('[') {
        return Some(ParamType::Pointer);
    }
    let words: Vec<&str> = p
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const"
                    | "volatile"
                    | "__restrict__"
                    | "restrict"
                    | "__grid_constant__"
                    | "register"
            )
        })
        .collect();
    // The last word is the parameter's name unless the declaration is a bare type.
    let ty = match words.len() {
        0 => return Some(ParamType::Unknown),
        1 => words.clone(),
        n => words[..n - 1].to_vec(),
    };
    Some(c_type(&ty.join(" ")))
}

fn c_type(t: &str) -> ParamType {
    use ParamType::*;
    match t {
        "float" => F32,
        "double" => F64,
        "__half" | "half" | "c10::Half" => F16,
        "__nv_bfloat16" | "nv_bfloat16" | "__bf16" | "c10::BFloat16" => Bf16,
        "char" | "signed char" | "int8_t" => I8,
        "unsigned char" | "uint8_t" | "bool" => U8,
        "short" | "signed short" | "int16_t" => I16,
        "unsigned short" | "uint16_t" => U16,
        "int" | "signed" | "signed int" | "int32_t" => I32,
        "unsigned" | "unsigned int" | "uint32_t" | "uint" => U32,
        "long long" | "long long int" | "signed long long" | "int64_t" | "long" | "ptrdiff_t" => {
            I64
        }
        "unsigned long long"
        | "unsigned long long int"
        | "uint64_t"
        | "unsigned long"
        | "size_t" => U64,
        _ => Unknown,
    }
}

/// The signature of `.entry kernel(...)` in PTX. A 64-bit parameter is a pointer or a 64-bit
/// integer and PTX does not say which, so it is left unknown.
pub fn from_ptx(ptx: &str, kernel: &str) -> Option<Vec<ParamType>> {
    // The name whole: `.entry saxpy` must not find `.entry saxpy_pdl(`.
    let key = format!(".entry {kernel}");
    let at = ptx
        .match_indices(&key)
        .map(|(i, _)| i)
        .find(|&i| ptx[i + key.len()..].starts_with(|c: char| c == '(' || c.is_whitespace()))?;
    let rest = &ptx[at..];
    let open = rest.find('(')?;
    // An entry without parameters has no parenthesis before its body.
    if rest.find('{').is_some_and(|b| b < open) {
        return Some(Vec::new());
    }
    let list = balanced(&rest[open + 1..])?;
    Some(
        list.split(',')
            .filter(|p| p.contains(".param"))
            .map(|p| {
                use ParamType::*;
                if p.contains('[') {
                    return Unknown;
                }
                match p
                    .split_whitespace()
                    .find(|w| w.starts_with('.') && *w != ".param")
                {
                    Some(".f32") => F32,
                    Some(".f64") => F64,
                    Some(".s32") => I32,
                    Some(".u32" | ".b32") => U32,
                    Some(".s16") => I16,
                    Some(".u16" | ".b16") => U16,
                    Some(".s8") => I8,
                    Some(".u8" | ".b8") => U8,
                    _ => Unknown,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::ParamType::*;
    use super::*;

    /// A kernel compiled by nvcc without `extern "C"` says its pointers' types and constness in
    /// its name; a by-value array of pointers (PyTorch's) is a value, not a pointer.
    #[test]
    fn pointer_parameters_from_mangled_names() {
        use crate::backend::ElemType;
        let p = pointer_params_from_name("_Z6sqrt_kPfPKfi").unwrap();
        let got: Vec<Option<(Option<ElemType>, bool)>> =
            p.iter().map(|x| x.map(|x| (x.elem, x.is_const))).collect();
        assert_eq!(
            got,
            vec![
                Some((Some(ElemType::F32), false)),
                Some((Some(ElemType::F32), true)),
                None
            ]
        );
        assert_eq!(pointee("at::detail::Array<char*, 2>"), None);
        assert_eq!(
            pointee("c10::Half const*"),
            Some(("c10::Half".into(), true))
        );
        assert_eq!(
            pointee("float* __restrict__"),
            Some(("float".into(), false))
        );
        assert_eq!(
            pointee("const float* __restrict__ x"),
            Some(("float".into(), true))
        );
        assert_eq!(pointee("int n"), None);
    }

    /// IEEE half to double as this file did it by hand before `half`: the reference half's
    /// widening is checked against.
    fn f16_by_hand(h: u16) -> f64 {
        let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exp = ((h >> 10) & 0x1f) as i32;
        let frac = (h & 0x3ff) as f64;
        sign * match exp {
            0 => frac * 2f64.powi(-24),
            0x1f if frac == 0.0 => f64::INFINITY,
            0x1f => f64::NAN,
            e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
        }
    }

    #[test]
    fn half_widens_every_f16_and_bf16_to_the_same_value() {
        for h in 0..=u16::MAX {
            let (ours, theirs) = (f16_by_hand(h), half::f16::from_bits(h).to_f64());
            assert!(
                ours.to_bits() == theirs.to_bits() || ours.is_nan() && theirs.is_nan(),
                "{h:#06x}: {ours} vs {theirs}"
            );
            let (ours, theirs) = (
                f32::from_bits((h as u32) << 16) as f64,
                half::bf16::from_bits(h).to_f64(),
            );
            assert!(
                ours.to_bits() == theirs.to_bits() || ours.is_nan() && theirs.is_nan(),
                "{h:#06x}: {ours} vs {theirs}"
            );
        }
    }

    #[test]
    fn c_signatures() {
        let src = "// rmsnorm(x) is not this\nstatic void rmsnorm(int);\n\
                   extern \"C\" __global__ void rmsnorm(const float* __restrict__ x, float* out,\n\
                   unsigned n, const float eps, __nv_bfloat16 s, long long k, Pair p) { }\n\
                   extern \"C\" __global__ void empty() {}\n\
                   extern \"C\" __global__ void v(void) {}";
        assert_eq!(
            from_c(src, "rmsnorm").unwrap(),
            vec![Pointer, Pointer, U32, F32, Bf16, I64, Unknown]
        );
        assert_eq!(from_c(src, "empty").unwrap(), vec![]);
        assert_eq!(from_c(src, "v").unwrap(), vec![]);
        assert_eq!(from_c(src, "missing"), None);
        // `rms` is a prefix of `rmsnorm`, not a kernel.
        assert_eq!(from_c(src, "rms"), None);
        assert_eq!(from_c(src, ""), None);
    }

    /// Pointers say what they point at and whether the kernel may write through them; an
    /// `unsigned short*` is not taken for bf16.
    #[test]
    fn pointer_elements_and_constness() {
        use crate::backend::ElemType as E;
        let src = "extern \"C\" __global__ void k(const float* __restrict__ x, float *out,\n\
                   __nv_bfloat16* h, const __half* g, unsigned short* raw, float const* y, int n, float* const z) {}";
        let p = |elem: Option<E>, is_const| {
            Some(PointerParam {
                elem,
                is_const,
                maybe_float: true,
            })
        };
        assert_eq!(
            pointer_params(src, "k").unwrap(),
            vec![
                p(Some(E::F32), true),
                p(Some(E::F32), false),
                p(Some(E::Bf16), false),
                p(Some(E::F16), true),
                p(None, false),
                p(Some(E::F32), true),
                None,
                p(Some(E::F32), false),
            ]
        );
        assert_eq!(pointer_params(src, "missing"), None);
    }

    #[test]
    fn ptx_signatures() {
        let ptx =
            ".visible .entry saxpy(\n\t.param .u64 saxpy_param_0,\n\t.param .u32 saxpy_param_1,\n\
                   \t.param .f32 saxpy_param_2,\n\t.param .align 8 .b8 saxpy_param_3[16]\n)\n{\n}\n\
                   .visible .entry empty()\n{\n}\n";
        assert_eq!(
            from_ptx(ptx, "saxpy").unwrap(),
            vec![Unknown, U32, F32, Unknown]
        );
        assert_eq!(from_ptx(ptx, "empty").unwrap(), vec![]);
        // A prefix of another entry's name is not that entry.
        assert_eq!(from_ptx(ptx, "sax"), None);
        let two = ".visible .entry saxpy_pdl(\n\t.param .f32 p\n)\n{\n}\n.visible .entry saxpy(\n\t.param .u32 q\n)\n{\n}\n";
        assert_eq!(from_ptx(two, "saxpy").unwrap(), vec![U32]);
    }

    #[test]
    fn values() {
        assert_eq!(F32.render(&1e-5f32.to_le_bytes()).unwrap(), "1e-5f");
        assert_eq!(F32.render(&1.0f32.to_le_bytes()).unwrap(), "1.0f");
        assert_eq!(F64.render(&0.1f64.to_le_bytes()).unwrap(), "0.1d");
        assert_eq!(Bf16.render(&0x3f80u16.to_le_bytes()).unwrap(), "1.0b");
        assert_eq!(F16.render(&0x3c00u16.to_le_bytes()).unwrap(), "1.0h");
        assert_eq!(F16.render(&0xc000u16.to_le_bytes()).unwrap(), "-2.0h");
        assert_eq!(I32.render(&(-3i32).to_le_bytes()).unwrap(), "-3");
        assert_eq!(U32.render(&64u32.to_le_bytes()).unwrap(), "64");
        // A size that does not fit the type stays unrendered (hex).
        assert_eq!(F32.render(&[0u8; 8]), None);
        assert_eq!(Pointer.render(&[0u8; 8]), None);
    }
}
