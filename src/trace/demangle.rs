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

#[cfg(test)]
mod tests {
    use super::readable;

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
