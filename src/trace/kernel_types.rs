//! What a compiled kernel nobody described reads and writes: its element type, and how that
//! was known. A driver-level recording (`gputape run -o`) of PyTorch, cuBLAS or Triton code has
//! no declared element types; the value checks (`--check-finite`, `inspect`) need one to read
//! a buffer's bytes as numbers. Each answer says where it came from, so a NaN found under a
//! guessed type is not reported as one found under a known type:
//!
//! | source | example | what is taken |
//! |---|---|---|
//! | a rule the user gives (`--dtype 'GLOB[:ARG]=TYPE'`) | `'*gemm*=bf16'` | the rule's type, for that parameter or every one |
//! | PyTorch's template arguments | `reduce_kernel<512, 1, ReduceOp<float, ...>>` | the first element type among them: the data's (an index type or an accumulator comes later; a random kernel's is its `distribution_nullary_kernel`'s) |
//! | cuBLAS and CUTLASS kernel names | `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn...`, `cutlass_80_tensorop_s1688bf16gemm_...`, `ampere_sgemm_...` | the operand type the name spells: the output's where it names one |
//!
//! | cuBLAS's `nvjet_*` kernels (Hopper) | `nvjet_sm90_tst_64x8_...` | the output letter of a code NVIDIA does not document (`h` f16, `t` bf16, `s` f32): unconfirmed until a replay's measured writes read as that type (`replayer::writes`) |
//!
//! Triton's kernels (plain names) and anything else get no type from the name; a replay that
//! measures what they wrote may infer one from the bytes, said as a guess.

use std::fmt;

use crate::backend::ElemType;

/// An element type, of the ones kernels name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ValueType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit float, 4 exponent bits (`e4m3fn`, `e4m3fnuz`).
    F8E4M3,
    /// 8-bit float, 5 exponent bits.
    F8E5M2,
    /// 64-bit integer (`long`; `unsigned long` read as one).
    I64,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// 16-bit integer.
    I16,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// One byte, 0 or 1.
    Bool,
}

impl ValueType {
    /// The name reports and `--dtype` use.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::F64 => "f64",
            ValueType::F32 => "f32",
            ValueType::F16 => "f16",
            ValueType::Bf16 => "bf16",
            ValueType::F8E4M3 => "f8e4m3",
            ValueType::F8E5M2 => "f8e5m2",
            ValueType::I64 => "i64",
            ValueType::I32 => "i32",
            ValueType::U32 => "u32",
            ValueType::I16 => "i16",
            ValueType::I8 => "i8",
            ValueType::U8 => "u8",
            ValueType::Bool => "bool",
        }
    }

    /// Every type, for parsing and help text.
    pub const ALL: [ValueType; 13] = [
        ValueType::F64,
        ValueType::F32,
        ValueType::F16,
        ValueType::Bf16,
        ValueType::F8E4M3,
        ValueType::F8E5M2,
        ValueType::I64,
        ValueType::I32,
        ValueType::U32,
        ValueType::I16,
        ValueType::I8,
        ValueType::U8,
        ValueType::Bool,
    ];

    /// Parses a type's name (`bf16`; `float`, `half` and `bfloat16` too).
    pub fn parse(s: &str) -> Option<ValueType> {
        let s = s.trim().to_ascii_lowercase();
        let alias = match s.as_str() {
            "float" | "fp32" | "float32" => Some(ValueType::F32),
            "double" | "fp64" | "float64" => Some(ValueType::F64),
            "half" | "fp16" | "float16" => Some(ValueType::F16),
            "bfloat16" => Some(ValueType::Bf16),
            _ => None,
        };
        alias.or_else(|| ValueType::ALL.into_iter().find(|t| t.name() == s))
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            ValueType::F64 | ValueType::I64 => 8,
            ValueType::F32 | ValueType::I32 | ValueType::U32 => 4,
            ValueType::F16 | ValueType::Bf16 | ValueType::I16 => 2,
            ValueType::F8E4M3
            | ValueType::F8E5M2
            | ValueType::I8
            | ValueType::U8
            | ValueType::Bool => 1,
        }
    }

    /// The float type the finite scan reads, for the types it can scan.
    pub fn scannable(self) -> Option<ElemType> {
        match self {
            ValueType::F32 => Some(ElemType::F32),
            ValueType::F16 => Some(ElemType::F16),
            ValueType::Bf16 => Some(ElemType::Bf16),
            _ => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a kernel's type was known.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum How {
    /// A `--dtype` rule of the user's (its text).
    Rule(String),
    /// The first element type among PyTorch's (or any C++ template's) arguments.
    Template,
    /// The operand type a cuBLAS or CUTLASS kernel's name spells.
    GemmName,
    /// The output letter of a cuBLAS `nvjet_*` kernel's type code (`tst`: bf16 in, f32
    /// compute, bf16 out). NVIDIA does not document the code, so a replay confirms it from the
    /// bytes the kernel wrote before calling it known.
    NvjetCode,
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            How::Rule(r) => write!(f, "rule {r}"),
            How::Template => f.write_str("its template arguments"),
            How::GemmName => f.write_str("its cuBLAS/CUTLASS name"),
            How::NvjetCode => f.write_str("its nvjet type code (undocumented)"),
        }
    }
}

/// A kernel's element type and how it was known.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Typed {
    /// The type.
    pub ty: ValueType,
    /// Where it came from.
    pub how: How,
}

/// Where a kernel's declared element types (`KernelInfo::elems`) came from: a driver-level
/// recording declares nothing, so in a trace that holds the module's image they are Triton's
/// (`shimtrace::triton`); `None` where the engine declared them.
pub fn declared_by_triton(t: &super::Trace, module: &str) -> Option<&'static str> {
    t.module_images
        .contains_key(module)
        .then_some("its Triton signature")
}

/// The type a kernel's name gives, from its symbol (mangled or not): `None` when the name
/// names none (see the module's table for what is read).
pub fn from_name(symbol: &str) -> Option<Typed> {
    if let Some(full) = super::demangle::full(symbol) {
        if let Some(ty) = first_template_type(&full) {
            return Some(Typed {
                ty,
                how: How::Template,
            });
        }
    }
    gemm_type(symbol)
        .map(|ty| Typed {
            ty,
            how: How::GemmName,
        })
        .or_else(|| {
            nvjet_type(symbol).map(|ty| Typed {
                ty,
                how: How::NvjetCode,
            })
        })
}

/// The output type of a cuBLAS `nvjet_[smNN_]ABC_...` kernel: the code's letters name the
/// inputs', the compute's and the output's types, `h` f16, `t` bf16, `s` f32 (`hsh`, `tst`,
/// `sss`, as cuBLAS 12.x profiles show them); other codes (fp8's) are left unnamed.
fn nvjet_type(symbol: &str) -> Option<ValueType> {
    let rest = symbol.strip_prefix("nvjet_")?;
    let code = rest
        .split('_')
        .find(|part| !(part.starts_with("sm") && part[2..].chars().all(|c| c.is_ascii_digit())))?;
    let letter = |c: char| match c {
        'h' => Some(ValueType::F16),
        't' => Some(ValueType::Bf16),
        's' => Some(ValueType::F32),
        _ => None,
    };
    let letters: Vec<char> = code.chars().collect();
    match letters.as_slice() {
        [a, 's', out] if letter(*a).is_some() => letter(*out),
        _ => None,
    }
}

/// The C++ spellings of element types, as a demangler writes them.
const CPP: [(&str, ValueType); 22] = [
    ("float", ValueType::F32),
    ("double", ValueType::F64),
    ("c10::Half", ValueType::F16),
    ("__half", ValueType::F16),
    ("half", ValueType::F16),
    ("c10::BFloat16", ValueType::Bf16),
    ("__nv_bfloat16", ValueType::Bf16),
    ("c10::Float8_e4m3fn", ValueType::F8E4M3),
    ("c10::Float8_e4m3fnuz", ValueType::F8E4M3),
    ("c10::Float8_e5m2", ValueType::F8E5M2),
    ("c10::Float8_e5m2fnuz", ValueType::F8E5M2),
    ("long", ValueType::I64),
    ("long long", ValueType::I64),
    ("int", ValueType::I32),
    ("unsigned int", ValueType::U32),
    ("short", ValueType::I16),
    ("signed char", ValueType::I8),
    ("char", ValueType::I8),
    ("unsigned char", ValueType::U8),
    ("bool", ValueType::Bool),
    ("unsigned long", ValueType::I64),
    ("int64_t", ValueType::I64),
];

/// The first element type among a demangled name's template arguments (and the parameters
/// of lambdas inside them, `{lambda(float)#1}`): the text after the function's first `<`, cut
/// at every bracket, comma and pointer or reference mark. `char*` (PyTorch's array of data
/// pointers) is a pointer, not an element.
fn first_template_type(demangled: &str) -> Option<ValueType> {
    // PyTorch's random kernels name their engine's word type first
    // (`distribution_elementwise_grid_stride_kernel<unsigned int, ...>`); the tensor's type is
    // the first argument of the `distribution_nullary_kernel` inside.
    const NULLARY: &str = "distribution_nullary_kernel<";
    let head = demangled.find(NULLARY).map_or(0, |i| i + NULLARY.len() - 1);
    let args = &demangled[head + demangled[head..].find('<')? + 1..];
    let element = |token: &str| {
        let t = token.trim();
        let t = t.strip_prefix("const ").unwrap_or(t);
        let t = t.strip_suffix(" const").unwrap_or(t).trim();
        CPP.iter().find(|(s, _)| *s == t).map(|(_, ty)| *ty)
    };
    let mut from = 0;
    for (i, ch) in args.char_indices() {
        if matches!(
            ch,
            '<' | '>' | ',' | '(' | ')' | '{' | '}' | '&' | '*' | '[' | ']'
        ) {
            // A token just before `*` is a pointer's pointee, not an element.
            if ch != '*' {
                if let Some(ty) = element(&args[from..i]) {
                    return Some(ty);
                }
            }
            from = i + ch.len_utf8();
        }
    }
    None
}

/// The operand type a GEMM kernel's name spells: cuBLAS's `xmma_gemm_<ab>_<c...>_...` (the
/// output's, the second group, else the inputs'), CUTLASS's `..._s1688bf16gemm_...`, and the
/// `sgemm`/`dgemm`/`hgemm` families.
fn gemm_type(symbol: &str) -> Option<ValueType> {
    let name = symbol.to_ascii_lowercase();
    if name.starts_with("nvjet") || !(name.contains("gemm") || name.contains("gemv")) {
        return None;
    }
    // Groups of type codes: `bf16bf16`, `f32f32`, `bf16f32`.
    let groups: Vec<Vec<ValueType>> = name
        .split('_')
        .filter_map(|tok| codes(tok).filter(|c| !c.is_empty()))
        .collect();
    if let Some(ty) = groups
        .get(1)
        .or(groups.first())
        .and_then(|g| g.first().copied())
    {
        return Some(ty);
    }
    for (spelled, ty) in [
        ("bf16gemm", ValueType::Bf16),
        ("f16gemm", ValueType::F16),
        ("hgemm", ValueType::F16),
        ("dgemm", ValueType::F64),
        ("sgemm", ValueType::F32),
        ("s1688gemm", ValueType::F32),
        ("s16816gemm", ValueType::F32),
        ("tf32gemm", ValueType::F32),
    ] {
        if name.contains(spelled) {
            return Some(ty);
        }
    }
    None
}

/// `tok` read wholly as type codes (`bf16f32` -> bf16, f32), or `None`.
fn codes(mut tok: &str) -> Option<Vec<ValueType>> {
    const CODES: [(&str, ValueType); 7] = [
        ("bf16", ValueType::Bf16),
        ("tf32", ValueType::F32),
        ("f16", ValueType::F16),
        ("f32", ValueType::F32),
        ("f64", ValueType::F64),
        ("e4m3", ValueType::F8E4M3),
        ("e5m2", ValueType::F8E5M2),
    ];
    let mut out = Vec::new();
    while !tok.is_empty() {
        let (code, ty) = CODES.iter().find(|(c, _)| tok.starts_with(c))?;
        out.push(*ty);
        tok = &tok[code.len()..];
    }
    Some(out)
}

/// A user's rule: kernels whose name (symbol or demangled) matches `glob` hold `ty` behind
/// parameter `param` (every pointer when `None`), or behind pointer `inner` of a by-value
/// parameter holding several (PyTorch's `Array<char*, N>`: `3.1` is the second pointer in
/// parameter 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRule {
    /// The kernel pattern (`*` and `?`).
    pub glob: String,
    /// The parameter, and the pointer inside it, the rule is about (`None`: every one).
    pub param: Option<(usize, Option<usize>)>,
    /// The type it gives.
    pub ty: ValueType,
    /// As the user wrote it, for reports.
    pub text: String,
}

impl TypeRule {
    /// Parses `GLOB[:ARG]=TYPE`.
    pub fn parse(s: &str) -> Result<TypeRule, String> {
        let (lhs, ty) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("{s:?}: expected GLOB[:ARG]=TYPE"))?;
        let ty = ValueType::parse(ty).ok_or_else(|| {
            format!(
                "{s:?}: unknown type {ty:?} (one of {})",
                ValueType::ALL.map(|t| t.name()).join(", ")
            )
        })?;
        let (glob, param) = match lhs.rsplit_once(':') {
            // `::` belongs to a C++ name, not to an ARG.
            Some((g, a)) if !g.ends_with(':') && !a.is_empty() => {
                let (p, inner) = match a.split_once('.') {
                    Some((p, i)) => (p, Some(i)),
                    None => (a, None),
                };
                let p: usize = p
                    .parse()
                    .map_err(|_| format!("{s:?}: ARG {a:?} is not N or N.M"))?;
                let inner = inner
                    .map(|i| i.parse::<usize>())
                    .transpose()
                    .map_err(|_| format!("{s:?}: ARG {a:?} is not N or N.M"))?;
                (g, Some((p, inner)))
            }
            _ => (lhs, None),
        };
        if glob.is_empty() {
            return Err(format!("{s:?}: the kernel pattern is empty"));
        }
        Ok(TypeRule {
            glob: glob.to_string(),
            param,
            ty,
            text: s.to_string(),
        })
    }

    /// Whether the rule is about kernel `symbol` (its symbol or its demangled name matches).
    pub fn matches(&self, symbol: &str) -> bool {
        glob(&self.glob, symbol)
            || super::demangle::full(symbol).is_some_and(|full| glob(&self.glob, &full))
    }
}

/// The type of a kernel's parameter `param` (pointer `inner` inside it): the first rule about
/// it, else what the kernel's name says.
pub fn type_of(
    rules: &[TypeRule],
    symbol: &str,
    param: usize,
    inner: Option<usize>,
) -> Option<Typed> {
    rules
        .iter()
        .find(|r| {
            r.matches(symbol)
                && r.param
                    .is_none_or(|(p, i)| p == param && (i.is_none() || i == inner))
        })
        .map(|r| Typed {
            ty: r.ty,
            how: How::Rule(r.text.clone()),
        })
        .or_else(|| from_name(symbol))
}

/// Shell-style `*` and `?` matching of the whole of `s`.
fn glob(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while j < s.len() {
        if i < p.len() && (p[i] == '?' || p[i] == s[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(st) = star {
            i = st + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_names_spell_their_operand_types() {
        let cases = [
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", Some(ValueType::Bf16)),
            ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3", Some(ValueType::F32)),
            ("_ZN7cutlass7Kernel2I54cutlass_80_tensorop_s1688bf16gemm_64x64_16x6_nn_align1EEvNT_6ParamsE", Some(ValueType::Bf16)),
            ("_ZN7cutlass7Kernel2I53cutlass_80_tensorop_s1688f16gemm_64x64_16x6_nn_align1EEvNT_6ParamsE", Some(ValueType::F16)),
            ("_ZN7cutlass7Kernel2I41cutlass_80_simt_sgemm_64x64_8x5_nn_align1EEvNT_6ParamsE", Some(ValueType::F32)),
            ("ampere_sgemm_128x64_nn", Some(ValueType::F32)),
            ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", Some(ValueType::Bf16)),
            ("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_TNT", Some(ValueType::F16)),
            ("nvjet_sm90_sss_64x8_64x16_4x1_v_bz_TNN", Some(ValueType::F32)),
            ("nvjet_sm100_qqtst_128x256_64x4_2x1_v_bz_TNT", None),
            ("triton_poi_fused_add_0", None),
        ];
        for (name, want) in cases {
            assert_eq!(from_name(name).map(|t| t.ty), want, "{name}");
        }
    }

    #[test]
    fn template_arguments_name_the_data_type_first() {
        let cases = [
            // indexSelectSmallIndex<float, long, unsigned int, 2, 2, -2>
            ("_ZN2at6native44_GLOBAL__N__50c743a2_11_Indexing_cu_89862edb21indexSelectSmallIndexIfljLi2ELi2ELin2EEEvNS_4cuda6detail10TensorInfoIT_T1_EENS5_IKS6_S7_EENS5_IKT0_S7_EEiiS7_l", ValueType::F32),
            // vectorized_elementwise_kernel<2, FillFunctor<long>, std::array<char*, 1>>
            ("_ZN2at6native29vectorized_elementwise_kernelILi2ENS0_11FillFunctorIlEESt5arrayIPcLm1EEEEviT0_T1_", ValueType::I64),
            // reduce_kernel<512, 1, ReduceOp<float, ...>>
            ("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14TensorIteratorEEUlffE_EEjfLi4ELi4EEEEEvT1_", ValueType::F32),
        ];
        for (name, want) in cases {
            let t = from_name(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!((t.ty, t.how), (want, How::Template), "{name}");
        }
        assert_eq!(
            from_name("_Z5scalePfif"),
            None,
            "no template: nothing named"
        );
    }

    #[test]
    fn rules_parse_and_win_over_names() {
        let r = TypeRule::parse("*gemm*:3.1=bf16").unwrap();
        assert_eq!(
            (r.glob.as_str(), r.param, r.ty),
            ("*gemm*", Some((3, Some(1))), ValueType::Bf16)
        );
        let r = TypeRule::parse("at::native::*reduce*=f16").unwrap();
        assert_eq!((r.glob.as_str(), r.param), ("at::native::*reduce*", None));
        assert!(TypeRule::parse("*=bf17")
            .unwrap_err()
            .contains("unknown type"));
        assert!(TypeRule::parse("k:x=f32")
            .unwrap_err()
            .contains("not N or N.M"));
        assert!(TypeRule::parse("nothing").is_err());
        let rules = [TypeRule::parse("*sgemm*:2=f16").unwrap()];
        let sgemm = "ampere_sgemm_128x64_nn";
        assert_eq!(type_of(&rules, sgemm, 2, None).unwrap().ty, ValueType::F16);
        let t = type_of(&rules, sgemm, 1, None).unwrap();
        assert_eq!((t.ty, t.how), (ValueType::F32, How::GemmName));
        // A demangled name matches too.
        let rules = [TypeRule::parse("at::native::reduce_kernel<*=bf16").unwrap()];
        let sym = "_ZN2at6native13reduce_kernelILi512ELi1EEEvv";
        assert_eq!(type_of(&rules, sym, 0, None).unwrap().ty, ValueType::Bf16);
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("*gemm*", "sm90_xmma_gemm_x"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a*c", "abd"));
        assert!(glob("*", ""));
    }
}
