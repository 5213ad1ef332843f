//! A validating single-pass scanner of compact JSON, for building cached objects from a
//! member's bytes without decoding them into a `serde_json::Value` tree.
//!
//! The scanner checks the JSON grammar (RFC 8259) as it skips values — strings (escapes and
//! control characters), numbers, literals, nesting up to [`MAX_DEPTH`] as serde_json — and
//! reports byte ranges, so callers copy the member's bytes as they are. It notes whether any
//! whitespace occurred outside strings ([`Scan::spaced`]); callers that need compact output
//! fall back to a full decode then. The input must be valid UTF-8 (checked by [`Scan::new`]).

use std::collections::HashMap;

/// Nesting limit (serde_json's recursion limit).
pub const MAX_DEPTH: u32 = 128;

/// Bytes at the start of a value that [`Seen`] finds it by; shorter values are not kept.
const SEEN_HEAD: usize = 512;
/// Bytes of values a [`Seen`] holds before it starts over.
const SEEN_BYTES: usize = 1 << 20;
/// Values kept under one key (the oldest goes first).
const SEEN_PER_KEY: usize = 4;

/// Values this scanner has checked recently, found again by comparing bytes, so that a value
/// repeated across objects is checked once: the `managedFields` entries of pods that one
/// controller made are byte-for-byte equal, and most of a pod's JSON strings are in them.
///
/// A value is skipped when the input at the cursor starts with one checked before at the same
/// depth; that gives the verdict and the end that checking it again would (an object or array
/// ends where its own bytes say). Kept: objects and arrays of at least 512 bytes without
/// whitespace between tokens, at most 1 MiB in all (then it starts over), keyed by a seeded
/// hash of their first 512 bytes (which hold what tells one owner's entries from another's,
/// such as its uid), at most 4 per key. The key only picks the candidates: a value is taken
/// only after comparing all its bytes.
pub struct Seen {
    by_head: HashMap<u64, Vec<(u32, Box<[u8]>)>>,
    bytes: usize,
    seed: u64,
}

impl Default for Seen {
    fn default() -> Seen {
        use std::hash::BuildHasher;
        let seed = std::hash::RandomState::new().hash_one(0u8);
        Seen { by_head: HashMap::new(), bytes: 0, seed }
    }
}

impl Seen {
    /// The key of a value's first [`SEEN_HEAD`] bytes (a word-wise multiply-rotate hash).
    fn key(&self, head: &[u8]) -> u64 {
        head.chunks_exact(8).fold(self.seed, |h, w| (h.rotate_left(23) ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

/// The input is not JSON of the expected shape (the caller decides whether to fall back to a
/// full decode, which reports the precise error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bad;

/// A JSON string token: the byte range of its contents (without the quotes) and whether it
/// holds escapes (then the raw bytes are not the string's value).
#[derive(Debug, Clone, Copy)]
pub struct Str {
    /// Offset of the first byte after the opening quote.
    pub start: usize,
    /// Offset of the closing quote.
    pub end: usize,
    /// The contents hold at least one `\` escape.
    pub escaped: bool,
}

/// The high bit of each byte of `w` (little-endian) that is `"`, `\\` or below 0x20; bytes
/// after such a byte may be flagged too, so only the lowest flag is exact.
#[inline]
fn special(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\'))) | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
}

/// The high bit of each byte of `w` that is `"` or `\\` (the test of [`special`] for input
/// known to hold no control byte); the lowest flag is exact.
#[inline]
fn quote_or_escape(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')))
}

/// The four hex digits at `at` as a number.
fn hex4(b: &[u8], at: usize) -> Result<u32, Bad> {
    let hex = b.get(at..at + 4).ok_or(Bad)?;
    let text = std::str::from_utf8(hex).map_err(|_| Bad)?;
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(Bad);
    }
    u32::from_str_radix(text, 16).map_err(|_| Bad)
}

/// Cursor over one JSON text.
pub struct Scan<'a> {
    b: &'a [u8],
    /// Current offset.
    pub pos: usize,
    spaced: bool,
    depth: u32,
    /// The input holds a byte below 0x20 (whitespace, or a control character that strings
    /// must not hold): strings then test for them too.
    control: bool,
}

impl<'a> Scan<'a> {
    /// A scanner at the start of `b`. Errors: [`Bad`] when `b` is not UTF-8.
    pub fn new(b: &'a [u8]) -> Result<Scan<'a>, Bad> {
        std::str::from_utf8(b).map_err(|_| Bad)?;
        // in blocks, so that the test vectorizes
        let control = b.chunks(64).any(|c| c.iter().fold(false, |m, &x| m | (x < 0x20)));
        Ok(Scan { b, pos: 0, spaced: false, depth: 0, control })
    }

    /// The input.
    pub fn bytes(&self) -> &'a [u8] {
        self.b
    }

    /// True when whitespace occurred between tokens so far.
    pub fn spaced(&self) -> bool {
        self.spaced
    }

    /// Skips whitespace.
    #[inline]
    pub fn ws(&mut self) {
        // compact JSON: the next byte is a token
        if self.b.get(self.pos).is_some_and(|c| *c > b' ') {
            return;
        }
        while let Some(c) = self.b.get(self.pos) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.spaced = true;
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The next byte (after whitespace), not consumed.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.pos).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Result<(), Bad> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(Bad)
        }
    }

    /// Consumes a string token.
    pub fn string(&mut self) -> Result<Str, Bad> {
        self.eat(b'"')?;
        let start = self.pos;
        let mut escaped = false;
        let b = self.b;
        let mut i = self.pos;
        loop {
            // eight bytes at a time while none is a quote, a backslash or a control byte (the
            // last only looked for when the input has one)
            while let Some(w) = b.get(i..i + 8) {
                let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                let m = if self.control { special(w) } else { quote_or_escape(w) };
                if m != 0 {
                    // the lowest flagged byte is a special one (false flags only follow it)
                    i += (m.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            let Some(&c) = b.get(i) else { return Err(Bad) };
            match c {
                b'"' => {
                    self.pos = i + 1;
                    return Ok(Str { start, end: i, escaped });
                }
                b'\\' => {
                    escaped = true;
                    match b.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            let cp = hex4(b, i + 2)?;
                            i += 6;
                            if (0xD800..0xDC00).contains(&cp) {
                                // a high surrogate must be followed by a low one (as serde_json
                                // requires when decoding strings)
                                if b.get(i..i + 2) != Some(b"\\u") || !(0xDC00..0xE000).contains(&hex4(b, i + 2)?) {
                                    return Err(Bad);
                                }
                                i += 6;
                            } else if (0xDC00..0xE000).contains(&cp) {
                                return Err(Bad);
                            }
                        }
                        _ => return Err(Bad),
                    }
                }
                0..=0x1f => return Err(Bad),
                _ => i += 1,
            }
        }
    }

    #[inline]
    fn digits(&mut self) -> Result<(), Bad> {
        let s = self.pos;
        while self.b.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        if self.pos == s {
            Err(Bad)
        } else {
            Ok(())
        }
    }

    fn number(&mut self) -> Result<(), Bad> {
        if self.b.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits()?,
            _ => return Err(Bad),
        }
        if self.b.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if matches!(self.b.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.b.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.digits()?;
        }
        Ok(())
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), Bad> {
        if self.b.get(self.pos..self.pos + lit.len()) == Some(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(Bad)
        }
    }

    /// Consumes any value. Iterative (one loop over the tokens, the open containers kept as
    /// bits), with the same checks as [`Scan::object`] and friends.
    pub fn value(&mut self) -> Result<(), Bad> {
        let base = self.depth;
        // bit d: the container open at local depth d is an object (else an array)
        let mut objects: u128 = 0;
        let mut d: u32 = 0;
        'value: loop {
            self.ws();
            match self.b.get(self.pos).copied().ok_or(Bad)? {
                b'"' => self.skip_string()?,
                c @ (b'{' | b'[') => {
                    self.pos += 1;
                    if base + d + 1 > MAX_DEPTH {
                        return Err(Bad);
                    }
                    let obj = c == b'{';
                    if obj {
                        objects |= 1 << d;
                    } else {
                        objects &= !(1 << d);
                    }
                    d += 1;
                    self.ws();
                    if self.b.get(self.pos) == Some(if obj { &b'}' } else { &b']' }) {
                        self.pos += 1;
                        d -= 1;
                    } else {
                        if obj {
                            self.key_colon()?;
                        }
                        continue 'value;
                    }
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => self.number()?,
            }
            // after a value: a separator, or the end of containers
            loop {
                if d == 0 {
                    return Ok(());
                }
                self.ws();
                let obj = (objects >> (d - 1)) & 1 == 1;
                match self.b.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        if obj {
                            self.key_colon()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if obj => {
                        self.pos += 1;
                        d -= 1;
                    }
                    Some(b']') if !obj => {
                        self.pos += 1;
                        d -= 1;
                    }
                    _ => return Err(Bad),
                }
            }
        }
    }

    /// Consumes any value as [`Scan::value`] does, skipping it when `seen` holds its bytes, and
    /// adding it to `seen` when checked here.
    pub fn value_seen(&mut self, seen: &mut Seen) -> Result<(), Bad> {
        let at = self.pos;
        let Some(head) = self.b.get(at..at + SEEN_HEAD) else { return self.value() };
        let key = seen.key(head);
        if let Some(known) = seen.by_head.get(&key) {
            for (depth, v) in known {
                if *depth == self.depth && self.b[at..].starts_with(v) {
                    self.pos += v.len();
                    return Ok(());
                }
            }
        }
        self.value()?;
        let v = &self.b[at..self.pos];
        if !self.spaced && matches!(v.first(), Some(b'{' | b'[')) && (SEEN_HEAD..=SEEN_BYTES).contains(&v.len()) {
            if seen.bytes + v.len() > SEEN_BYTES {
                seen.by_head.clear();
                seen.bytes = 0;
            }
            let known = seen.by_head.entry(key).or_default();
            if known.len() >= SEEN_PER_KEY {
                seen.bytes -= known.remove(0).1.len();
            }
            known.push((self.depth, v.into()));
            seen.bytes += v.len();
        }
        Ok(())
    }

    /// Consumes an object key and its colon.
    #[inline]
    fn key_colon(&mut self) -> Result<(), Bad> {
        if self.peek() != Some(b'"') {
            return Err(Bad);
        }
        self.skip_string()?;
        self.eat(b':')
    }

    /// Consumes the string token at the current offset (on its opening quote) without
    /// reporting it: inline for a string without escapes in an input without control bytes,
    /// else through [`Scan::string`].
    #[inline(always)]
    fn skip_string(&mut self) -> Result<(), Bad> {
        if !self.control {
            let b = self.b;
            let mut i = self.pos + 1;
            while let Some(w) = b.get(i..i + 8) {
                let m = quote_or_escape(u64::from_le_bytes(w.try_into().expect("8 bytes")));
                if m != 0 {
                    let end = i + (m.trailing_zeros() / 8) as usize;
                    if b[end] == b'"' {
                        self.pos = end + 1;
                        return Ok(());
                    }
                    break;
                }
                i += 8;
            }
        }
        self.string().map(|_| ())
    }

    /// Consumes an array, calling `item` for each element with the scanner placed before it;
    /// `item` must consume exactly the element.
    pub fn array_items(&mut self, mut item: impl FnMut(&mut Scan<'a>) -> Result<(), Bad>) -> Result<(), Bad> {
        self.eat(b'[')?;
        self.enter()?;
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            item(self)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Bad),
            }
        }
    }

    fn enter(&mut self) -> Result<(), Bad> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(Bad)
        } else {
            Ok(())
        }
    }

    /// Consumes an object, calling `field` for each member with its key, the scanner placed
    /// before the value; `field` must consume exactly the value (e.g. with [`Scan::value`]).
    pub fn object(&mut self, mut field: impl FnMut(&mut Scan<'a>, Str) -> Result<(), Bad>) -> Result<(), Bad> {
        self.eat(b'{')?;
        self.enter()?;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(Bad);
            }
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            field(self, key)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Bad),
            }
        }
    }

    /// Requires the end of the input (after whitespace).
    pub fn end(&mut self) -> Result<(), Bad> {
        if self.peek().is_none() {
            Ok(())
        } else {
            Err(Bad)
        }
    }

    /// The raw bytes of a key or string without its quotes.
    pub fn raw(&self, s: Str) -> &'a [u8] {
        &self.b[s.start..s.end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(s: &str) -> bool {
        let Ok(mut sc) = Scan::new(s.as_bytes()) else { return false };
        sc.value().is_ok() && sc.end().is_ok()
    }

    #[test]
    fn agrees_with_serde_json_on_validity() {
        let cases = [
            r#"{"a":1,"b":[true,false,null,-0.5e+3,"x\"y\\u00e9\n"],"c":{}}"#,
            r#"[]"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":-}"#,
            r#"{"a":"\x"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":"\u12G4"}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"[1,2"#,
            r#"{"a":tru}"#,
            r#"{"a":1} x"#,
            r#" { "a" : [ 1 , 2 ] } "#,
            r#"1e5"#,
            r#""\/""#,
            r#"[[],{},[{}],{"a":[]}]"#,
            r#"{"a":[{"b":[1,{"c":null}]}],"d":{"e":{}}}"#,
            r#"[1,]"#,
            r#"{"a":1,"b"}"#,
            r#"{"a":1,"b":}"#,
            r#"[{]"#,
            r#"{"a":[}"#,
            r#"[1 2]"#,
            r#"{"a":{"b":1}}}"#,
            r#"{"a":{"b":1}"#,
            r#"[[1],[2]]]"#,
            r#"{"a":[1],}"#,
            r#"{,"a":1}"#,
            r#"[,1]"#,
            r#"{"a":1,,"b":2}"#,
            r#"{"a":[true,false,nul]}"#,
            r#"{"a":-01}"#,
            r#"{"a":{}, "b" :[ ] }"#,
        ];
        for c in cases {
            let want = serde_json::from_str::<serde::de::IgnoredAny>(c).is_ok();
            assert_eq!(valid(c), want, "{c}");
        }
        for (c, ok) in [(r#""\ud83d\ude00""#, true), (r#""\ud83d""#, false), (r#""\ude00x""#, false), (r#""\ud83d\u0041""#, false)] {
            assert_eq!(valid(c), ok, "{c}");
            assert_eq!(serde_json::from_str::<String>(c).is_ok(), ok, "serde_json on {c}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(!valid(&deep), "nesting beyond the limit");
        for pairs in [50, 63, 64, 65] {
            // arrays and objects alternating, 2 × pairs levels (the limit is 128 levels)
            let nested = format!("{}1{}", "[{\"a\":".repeat(pairs), "}]".repeat(pairs));
            assert_eq!(valid(&nested), 2 * pairs <= MAX_DEPTH as usize, "{pairs} pairs");
        }
        assert!(Scan::new(b"\"\xff\"").is_err());
    }

    #[test]
    fn seen_values_are_skipped_only_when_equal() {
        let mut seen = Seen::default();
        let value = format!(r#"{{"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"c\"}}":{{}}}}}},"pad":"{}"}}"#, "x".repeat(500));
        assert!(value.len() > SEEN_HEAD);
        let scan = |text: &str, seen: &mut Seen| -> Result<usize, Bad> {
            let mut s = Scan::new(text.as_bytes())?;
            s.array_items(|s| s.value_seen(seen))?;
            s.end()?;
            Ok(s.pos)
        };
        // checked once, then found: the same verdict and end
        let text = format!("[{value},{value}]");
        assert_eq!(scan(&text, &mut seen), Ok(text.len()));
        assert_eq!(seen.by_head.values().map(Vec::len).sum::<usize>(), 1);
        assert_eq!(scan(&text, &mut seen), Ok(text.len()));
        // broken or different after the first 512 bytes (the same key): checked, not taken
        let unclosed = &value[..value.len() - 1];
        let control = value.replacen(r#"x"}"#, "\u{1}\"}", 1);
        let unquoted = value.replacen(r#"x"}"#, "x}", 1);
        for broken in [unclosed, &control, &unquoted] {
            assert_ne!(broken, value);
            assert_eq!(&broken.as_bytes()[..SEEN_HEAD], &value.as_bytes()[..SEEN_HEAD]);
            assert_eq!(scan(&format!("[{broken}]"), &mut seen), Err(Bad), "{broken}");
        }
        let longer = value.replacen(r#"x"}"#, r#"xy"}"#, 1);
        assert_eq!(scan(&format!("[{longer}]"), &mut seen), Ok(longer.len() + 2));
        // a value found as the prefix of a longer text ends where it did
        assert_eq!(scan(&format!("[{value}1]"), &mut seen), Err(Bad));
        // values with whitespace between tokens are not kept; nor are short ones
        let mut fresh = Seen::default();
        let spaced = value.replacen(r#"":"#, r#"": "#, 1);
        assert_eq!(scan(&format!("[{spaced}]"), &mut fresh), Ok(spaced.len() + 2));
        assert_eq!(scan(r#"[{"a":1}]"#, &mut fresh), Ok(9));
        assert!(fresh.by_head.is_empty());
        // found only at the depth it was checked at, so the nesting limit still holds
        let levels = MAX_DEPTH as usize - 2;
        let deep = format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
        let mut seen = Seen::default();
        assert_eq!(scan(&format!("[{deep}]"), &mut seen), Ok(deep.len() + 2));
        assert_eq!(seen.by_head.values().map(Vec::len).sum::<usize>(), 1);
        let nested = format!("[[[{deep}]]]");
        let mut s = Scan::new(nested.as_bytes()).unwrap();
        assert_eq!(s.array_items(|s| s.array_items(|s| s.array_items(|s| s.value_seen(&mut seen)))), Err(Bad));
    }

    #[test]
    fn finds_special_bytes_in_words() {
        for i in 0..8 {
            for c in [b'"', b'\\', 0u8, 0x1f, b'\n'] {
                let mut w = *b"abcdefgh";
                w[i] = c;
                assert_eq!(special(u64::from_le_bytes(w)).trailing_zeros() / 8, i as u32, "{c} at {i}");
            }
        }
        assert_eq!(special(u64::from_le_bytes(*b"a b~\x7f\xc3\xa9!")), 0);
        assert!(valid("\"0123456789abcdef\\\"0123456789\""));
        assert!(!valid("\"0123456789abc\tdef\""));
    }

    #[test]
    fn reports_keys_ranges_and_spacing() {
        let text = br#"{"k":{"x":"a\"b"},"n":[1]}"#;
        let mut s = Scan::new(text).unwrap();
        let mut seen = Vec::new();
        s.object(|s, k| {
            let at = s.pos;
            s.value()?;
            seen.push((String::from_utf8(s.raw(k).to_vec()).unwrap(), String::from_utf8(text[at..s.pos].to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [("k".to_string(), r#"{"x":"a\"b"}"#.to_string()), ("n".to_string(), "[1]".to_string())]);
        assert!(!s.spaced());
        let mut s = Scan::new(b"{\"a\": 1}").unwrap();
        s.value().unwrap();
        assert!(s.spaced());
    }
}
