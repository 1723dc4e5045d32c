//! Helpers for tests over traces: an engine's own CI and gputape's.
//!
//! Snapshots of calls name call sites; a site's line moves whenever an unrelated line above it
//! is edited, so a snapshot that keeps lines churns on every edit. [`mask_lines`] keeps the
//! file and drops line and column.

/// `src/model/mod.rs:346:18` becomes `src/model/mod.rs:_`, wherever a Rust source path with a
/// line (and optional column) appears in `text`.
pub fn mask_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(".rs:") {
        let (head, tail) = rest.split_at(i + 4);
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            rest = tail;
            continue;
        }
        let mut end = digits;
        let after = &tail[digits..];
        if let Some(col) = after.strip_prefix(':') {
            let d = col.bytes().take_while(u8::is_ascii_digit).count();
            if d > 0 {
                end += 1 + d;
            }
        }
        out.push('_');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::mask_lines;

    #[test]
    fn lines_and_columns_are_masked_and_nothing_else() {
        assert_eq!(
            mask_lines("at src/a.rs:12:5, b.rs:7 and c.rs: none; x.rs:9:"),
            "at src/a.rs:_, b.rs:_ and c.rs: none; x.rs:_:"
        );
        assert_eq!(mask_lines("no sites"), "no sites");
    }
}
