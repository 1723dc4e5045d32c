//! A call site's Python stack: what a driver-level recording of a Python program knows of
//! where each call came from (`Frame::Stack`, format 12). The site itself (`SiteDef`) names one
//! of its frames, the program's own line; the rest says how it got there.

use serde::{Deserialize, Serialize};

/// One frame: a Python one, or a native one (`file` its module and offset, `app+0x1a2b`,
/// `function` the nearest exported symbol or empty, line and column 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StackFrame {
    /// The source file, as the code object names it.
    pub file: String,
    /// The function's qualified name (`Block.forward`, `<lambda>`, `<module>`).
    pub function: String,
    /// 1-based line; 0 where the interpreter records none.
    pub line: u32,
    /// 1-based column; 0 where the interpreter records none.
    pub col: u32,
}

impl std::fmt::Display for StackFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 && self.col == 0 {
            f.write_str(&self.file)?;
            if !self.function.is_empty() {
                write!(f, " in {}", self.function)?;
            }
            return Ok(());
        }
        write!(
            f,
            "{}:{}:{} in {}",
            self.file, self.line, self.col, self.function
        )
    }
}

/// A site's stack, innermost frame first (at most the 16 innermost), and which frames the
/// site's two marks fall on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SiteStack {
    /// The frames, innermost first; empty for a Python thread that ran no Python code when
    /// it called (autograd's backward thread).
    pub frames: Vec<StackFrame>,
    /// The program's own line: the innermost frame outside the libraries it calls through
    /// (PyTorch, Triton): what the site names.
    pub user: Option<u16>,
    /// The script's line: the innermost frame outside every installed package.
    pub script: Option<u16>,
}

impl SiteStack {
    /// The frame the site names: the program's own, else the script's, else the innermost.
    pub fn named(&self) -> Option<&StackFrame> {
        let at = self.user.or(self.script).unwrap_or(0);
        self.frames.get(usize::from(at))
    }
}
