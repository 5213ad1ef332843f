//! A linear pre-check of YAML text's flow-collection nesting, run before libyaml parses it; uses no other fedctl module.

/// Flow collections (`[…]`, `{…}`) nested deeper than this are refused before the YAML
/// parser runs. libyaml's scanner does work proportional to the flow depth for every token,
/// so a document of 100,000 nested `[` costs it over a minute before serde_yaml's own limit
/// of 128 levels could refuse it; this bound (above that limit, so no document serde_yaml
/// would accept is refused) keeps the cost linear.
pub const MAX_YAML_FLOW_DEPTH: usize = 256;

/// Brackets inside quoted scalars that span lines count against this bound (see
/// [`check_yaml_nesting`]).
const MAX_HIDDEN_BRACKETS: usize = 1024;

/// Refuses YAML text whose flow collections nest deeper than [`MAX_YAML_FLOW_DEPTH`], in
/// one linear pass, before it reaches libyaml (whose scanner is quadratic in flow depth).
///
/// The pass follows YAML's lexical rules only as far as flow depth needs: a `[` or `{`
/// opens a flow collection where a node may start (after indentation, `- `, `? `, `: `, a
/// tag or an anchor, or inside a flow collection); quoted scalars and comments are skipped.
/// Where it cannot tell (a quoted scalar that spans lines may really be plain text), the
/// brackets it skipped are counted, and more than 1,024 of them are refused too, so hiding
/// deep nesting in what looks like a string does not get past it. Errors: a message saying
/// which bound was passed.
pub fn check_yaml_nesting(text: &str) -> Result<(), String> {
    let b = text.as_bytes();
    let n = b.len();
    let blank = |i: usize| i >= n || matches!(b[i], b' ' | b'\t' | b'\r' | b'\n');
    let mut i = 0;
    let mut depth = 0usize;
    let mut hidden = 0usize;
    // block context: a node may start here; flow context: a token starts here
    let mut start = true;
    while i < n {
        let c = b[i];
        if depth == 0 {
            match c {
                b'\n' => start = true,
                b' ' | b'\t' | b'\r' => {}
                b'#' if i == 0 || blank(i - 1) => {
                    i = line_end(b, i);
                    continue;
                }
                b':' | b'-' | b'?' if blank(i + 1) => start = c == b':' || start,
                _ if !start => {}
                b'[' | b'{' => {
                    depth = 1;
                    start = true;
                }
                b'"' | b'\'' => {
                    i = skip_quoted(b, i, &mut hidden);
                    // `"key": value` and JSON's `"key":value`
                    start = i < n && b[i] == b':';
                    if start {
                        i += 1;
                    }
                    continue;
                }
                b'!' | b'&' => {
                    while i < n && !blank(i) {
                        i += 1;
                    }
                    continue;
                }
                b'-' if b[i..].starts_with(b"---") => {
                    i += 3;
                    continue;
                }
                _ => start = false,
            }
        } else {
            match c {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_YAML_FLOW_DEPTH {
                        return Err(format!("flow collections nested deeper than {MAX_YAML_FLOW_DEPTH} levels"));
                    }
                    start = true;
                }
                b']' | b'}' => {
                    depth -= 1;
                    start = depth > 0;
                }
                b'"' | b'\'' if start => {
                    i = skip_quoted(b, i, &mut hidden);
                    start = false;
                    continue;
                }
                b'#' if i == 0 || blank(i - 1) => {
                    i = line_end(b, i);
                    continue;
                }
                b',' | b':' | b' ' | b'\t' | b'\r' | b'\n' => start = true,
                _ => start = false,
            }
        }
        if hidden > MAX_HIDDEN_BRACKETS {
            return Err(format!("more than {MAX_HIDDEN_BRACKETS} brackets inside multi-line quoted scalars"));
        }
        i += 1;
    }
    if hidden > MAX_HIDDEN_BRACKETS {
        return Err(format!("more than {MAX_HIDDEN_BRACKETS} brackets inside multi-line quoted scalars"));
    }
    Ok(())
}

/// Index of the `\n` ending the line at `i` (or the end).
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p)
}

/// Skips the quoted scalar opening at `i` (`'…'` with `''` escapes, `"…"` with `\`
/// escapes) and returns the index after it. When it spans lines, the brackets inside are
/// added to `hidden`.
fn skip_quoted(b: &[u8], i: usize, hidden: &mut usize) -> usize {
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if q == b'"' => j += 1,
            c if c == q => {
                if q == b'\'' && b.get(j + 1) == Some(&b'\'') {
                    j += 1;
                } else {
                    break;
                }
            }
            _ => {}
        }
        j += 1;
    }
    let end = (j + 1).min(b.len());
    let inner = &b[i..end.min(b.len())];
    if inner.contains(&b'\n') {
        *hidden += inner.iter().filter(|&&c| c == b'[' || c == b'{').count();
    }
    end
}
