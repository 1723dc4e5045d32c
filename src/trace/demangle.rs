//! Kernel names as people read them. A driver-level recording (`gputape run -o`) names kernels
//! by the symbols the program looked up, which for CUDA C++ are Itanium-mangled
//! (`_ZN2at6native29vectorized_elementwise_kernel...`); reports show them demangled. The trace
//! keeps the symbol: it is what a replay looks the kernel up by.

use std::borrow::Cow;

/// The longest name shown whole: PyTorch's template instantiations demangle to thousands of
/// characters, of which the head says which kernel it is.
const SHOWN: usize = 160;

/// `symbol` demangled (with its parameter list dropped), cut to `SHOWN` characters; a name
/// that is not a mangled C++ symbol, as it is.
pub fn readable(symbol: &str) -> Cow<'_, str> {
    let Some(mut s) = full(symbol) else {
        return Cow::Borrowed(symbol);
    };
    if s.chars().count() > SHOWN {
        s = s.chars().take(SHOWN).collect::<String>() + "...";
    }
    Cow::Owned(s)
}

/// `symbol` demangled whole (parameter list dropped), for reading its template arguments;
/// `None` for a name that is not a mangled C++ symbol.
pub fn full(symbol: &str) -> Option<String> {
    if !symbol.starts_with("_Z") {
        return None;
    }
    let opts = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    cpp_demangle::Symbol::new(symbol).ok()?.demangle(&opts).ok()
}

/// The parameter types of a mangled kernel, as the demangler spells them (`float const*`):
/// what an `nvcc`-compiled kernel that is not `extern "C"` tells of its arguments without its
/// source. `None` for a name that is not a mangled C++ function.
pub fn params(symbol: &str) -> Option<Vec<String>> {
    if !symbol.starts_with("_Z") {
        return None;
    }
    let opts = cpp_demangle::DemangleOptions::new().no_return_type();
    let s = cpp_demangle::Symbol::new(symbol)
        .ok()?
        .demangle(&opts)
        .ok()?;
    // The list is the parenthesized text that ends the name.
    let body = s.strip_suffix(')')?;
    let mut depth = 0usize;
    let open = body.char_indices().rev().find_map(|(i, c)| match c {
        ')' | '>' | ']' => {
            depth += 1;
            None
        }
        '(' | '<' | '[' if depth > 0 => {
            depth -= 1;
            None
        }
        '(' => Some(i),
        _ => None,
    })?;
    let list = &body[open + 1..];
    if list.trim().is_empty() {
        return Some(Vec::new());
    }
    Some(
        super::signature::split_top(list)
            .into_iter()
            .map(|p| p.trim().to_string())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::{params, readable};

    #[test]
    fn parameter_lists_come_from_mangled_names() {
        assert_eq!(
            params("_Z6sqrt_kPfPKfi").unwrap(),
            vec!["float*", "float const*", "int"]
        );
        assert_eq!(params("_Z4fillIfEvPT_i").unwrap(), vec!["float*", "int"]);
        assert_eq!(params("plain_c_kernel"), None);
    }

    #[test]
    fn mangled_symbols_read_as_their_functions() {
        assert_eq!(readable("_Z5scalePfif"), "scale");
        assert_eq!(
            readable("_ZN2at6native13reduce_kernelILi512ELi1EEEvv"),
            "at::native::reduce_kernel<512, 1>"
        );
        assert_eq!(readable("blas::saxpy"), "blas::saxpy");
        assert_eq!(readable("_Znot a symbol"), "_Znot a symbol");
    }
}
