//! A validating single-pass scanner of compact JSON, for building cached objects from a
//! member's bytes without decoding them into a `serde_json::Value` tree.
//!
//! The scanner checks the JSON grammar (RFC 8259) as it skips values — strings (escapes,
//! surrogate pairs and control characters), numbers, literals, nesting up to [`MAX_DEPTH`]
//! levels — and reports byte ranges, so callers copy the member's bytes as they are. It notes
//! whether any whitespace occurred outside strings ([`Scan::spaced`]); callers that need
//! compact output fall back to a full decode then. The input must be valid UTF-8 (checked by
//! [`Scan::new`]). It accepts what serde_json decodes into a `Value`, nesting limit included,
//! and also numbers beyond `f64` (as serde_json's `IgnoredAny` does).
//!
//! For text this process's own components wrote from checked objects (a cache endpoint's LIST
//! pages), [`skip_trusted`] and [`trusted_object`] find values' ends from brackets and string
//! ends alone, without the grammar checks.

use std::collections::HashMap;

/// Nesting limit in levels: as deep as serde_json decodes (its recursion limit of 128 refuses
/// the 128th level).
pub const MAX_DEPTH: u32 = 127;

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

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` (little-endian) that is `"`, `\\` or below 0x20; bytes
/// after such a byte may be flagged too, so only the lowest flag is exact.
///
/// A byte of `x = w ^ '"'`, `y = w ^ '\\'` or `w` wraps below zero when 1 (0x20) is taken
/// from it exactly when it is 0 (below 0x20), provided that no lower byte wrapped; bytes at
/// or above 0x80 (where the subtractions set the high bit too) are masked off by `!(x & y & w)`,
/// since they alone have the high bit set in all three.
#[inline(always)]
fn special(w: u64) -> u64 {
    let x = w ^ (ONES * u64::from(b'"'));
    let y = w ^ (ONES * u64::from(b'\\'));
    (x.wrapping_sub(ONES) | y.wrapping_sub(ONES) | w.wrapping_sub(ONES * 0x20)) & !(x & y & w) & HIGH
}

/// The high bit of each byte of `w` that is `"` or `\\` (the test of [`special`] for input
/// known to hold no control byte); the lowest flag is exact.
#[inline(always)]
fn quote_or_escape(w: u64) -> u64 {
    let x = w ^ (ONES * u64::from(b'"'));
    let y = w ^ (ONES * u64::from(b'\\'));
    (x.wrapping_sub(ONES) | y.wrapping_sub(ONES)) & !(x & y) & HIGH
}

/// The offset of the first quote or backslash at or after `i`, eight bytes at a time; `None` when
/// there is none. For readers that follow JSON strings across the chunks of a stream.
pub fn find_quote_or_escape(b: &[u8], mut i: usize) -> Option<usize> {
    while i + 8 <= b.len() {
        let m = quote_or_escape(u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes")));
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?.iter().position(|c| matches!(c, b'"' | b'\\')).map(|p| i + p)
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

/// The offset of the closing quote of the string whose contents start at `i`, and whether
/// the contents hold escapes: eight bytes at a time while none is a quote, a backslash or a
/// control byte (the last only looked for when `CONTROL`: the input holds one), escapes
/// checked where they are. Errors: [`Bad`] for a bad escape, a control byte or no closing quote.
#[inline(always)]
fn str_close<const CONTROL: bool>(b: &[u8], mut i: usize) -> Result<(usize, bool), Bad> {
    let mut escaped = false;
    // the last offset that eight bytes start at
    let last = b.len().checked_sub(8);
    loop {
        while last.is_some_and(|last| i <= last) {
            let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            let m = if CONTROL { special(w) } else { quote_or_escape(w) };
            if m != 0 {
                // the lowest flagged byte is a special one (false flags only follow it)
                i += (m.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        match b.get(i) {
            Some(b'"') => return Ok((i, escaped)),
            Some(b'\\') => {
                escaped = true;
                i = escape(b, i)?;
            }
            Some(0..=0x1f) | None => return Err(Bad),
            Some(_) => i += 1,
        }
    }
}

/// The string token at `i` (on its opening quote) of text a trusted writer made (see
/// [`skip_trusted`]): its contents' range, the offset after it is `end + 1`. Escapes are
/// checked; control bytes are not looked for. Errors: [`Bad`] when no string starts at `i`, an
/// escape is bad or the text ends first.
pub fn trusted_string(b: &[u8], i: usize) -> Result<Str, Bad> {
    if b.get(i) != Some(&b'"') {
        return Err(Bad);
    }
    let (end, escaped) = str_close::<false>(b, i + 1)?;
    Ok(Str { start: i + 1, end, escaped })
}

/// The value of a string token of `b` (escapes resolved; borrowed when it has none).
/// Errors: [`Bad`] when its contents are not UTF-8 or not a JSON string's.
pub fn str_value(b: &[u8], t: Str) -> Result<std::borrow::Cow<'_, str>, Bad> {
    if !t.escaped {
        return std::str::from_utf8(&b[t.start..t.end]).map(std::borrow::Cow::Borrowed).map_err(|_| Bad);
    }
    serde_json::from_slice::<String>(&b[t.start - 1..=t.end]).map(std::borrow::Cow::Owned).map_err(|_| Bad)
}

/// The offset of the first byte at or after `i` that is not JSON whitespace.
#[inline]
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// The offset after the last byte before `end` that is not JSON whitespace (0 when all are).
#[inline]
pub fn trim_ws_end(b: &[u8], mut end: usize) -> usize {
    while end > 0 && matches!(b[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
        end -= 1;
    }
    end
}

/// The offset after the JSON value at `i` (whitespace before it skipped), found from
/// brackets and string ends alone, strings eight bytes at a time as in [`Scan::value`];
/// scalars, commas and colons are not checked. For text a trusted writer made, whose values
/// were checked where they came from: a cache endpoint's LIST page, written from objects the
/// ingest scanned. Errors: [`Bad`] when the text ends first, a bracket closes nothing, or a
/// string escape is bad.
pub fn skip_trusted(b: &[u8], i: usize) -> Result<usize, Bad> {
    let mut i = skip_ws(b, i);
    let mut depth = 0u32;
    loop {
        match *b.get(i).ok_or(Bad)? {
            b'"' => {
                i = str_close::<false>(b, i + 1)?.0 + 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1).ok_or(Bad)?;
                i += 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            b',' | b':' if depth == 0 => return Err(Bad),
            _ if depth > 0 => i += 1,
            _ => {
                // a scalar on its own: through its last byte
                while b.get(i).is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b':' | b' ' | b'\n' | b'\r' | b'\t')) {
                    i += 1;
                }
                return Ok(i);
            }
        }
    }
}

/// Calls `member` for each member of the JSON object at `i` (whitespace before it skipped)
/// of text a trusted writer made (see [`skip_trusted`]), with the key's token and the offset
/// of its value; `member` returns the offset after the value. The offset after the object.
/// Errors: [`Bad`] when no object starts at `i` or its punctuation is off, or `member`'s.
pub fn trusted_object(b: &[u8], i: usize, mut member: impl FnMut(Str, usize) -> Result<usize, Bad>) -> Result<usize, Bad> {
    let mut i = skip_ws(b, i);
    if b.get(i) != Some(&b'{') {
        return Err(Bad);
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(i + 1);
    }
    loop {
        let k = trusted_string(b, i)?;
        i = skip_ws(b, k.end + 1);
        if b.get(i) != Some(&b':') {
            return Err(Bad);
        }
        i = skip_ws(b, member(k, skip_ws(b, i + 1))?);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Ok(i + 1),
            _ => return Err(Bad),
        }
    }
}

/// The offset after the escape sequence at `i` (on its backslash). Errors: [`Bad`] for an
/// unknown escape, bad hex digits, or a lone surrogate (serde_json refuses those when
/// decoding strings).
fn escape(b: &[u8], i: usize) -> Result<usize, Bad> {
    match b.get(i + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
        Some(b'u') => {
            let cp = hex4(b, i + 2)?;
            let i = i + 6;
            if (0xD800..0xDC00).contains(&cp) {
                // a high surrogate must be followed by a low one
                if b.get(i..i + 2) != Some(b"\\u") || !(0xDC00..0xE000).contains(&hex4(b, i + 2)?) {
                    return Err(Bad);
                }
                Ok(i + 6)
            } else if (0xDC00..0xE000).contains(&cp) {
                Err(Bad)
            } else {
                Ok(i)
            }
        }
        _ => Err(Bad),
    }
}

/// The offset after the digits at `i`. Errors: [`Bad`] when there are none.
#[inline]
fn digits(b: &[u8], i: usize) -> Result<usize, Bad> {
    let mut j = i;
    while b.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    if j == i {
        Err(Bad)
    } else {
        Ok(j)
    }
}

/// The offset after the number at `i`. Errors: [`Bad`] when none starts there.
fn number(b: &[u8], mut i: usize) -> Result<usize, Bad> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(b, i)?,
        _ => return Err(Bad),
    }
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Ok(i)
}

/// The offset after `lit` at `i`. Errors: [`Bad`] when the input does not hold it there.
#[inline]
fn literal(b: &[u8], i: usize, lit: &[u8]) -> Result<usize, Bad> {
    if b.get(i..i + lit.len()) == Some(lit) {
        Ok(i + lit.len())
    } else {
        Err(Bad)
    }
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
        let (end, escaped) = if self.control { str_close::<true>(self.b, start)? } else { str_close::<false>(self.b, start)? };
        self.pos = end + 1;
        Ok(Str { start, end, escaped })
    }

    /// Skips whitespace from `i` (a byte of at most `b' '`), noting it; the offset after it.
    #[inline(never)]
    fn ws_from(&mut self, mut i: usize) -> usize {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(i) {
            self.spaced = true;
            i += 1;
        }
        i
    }

    /// The byte at `i` after whitespace, and its offset. Errors: [`Bad`] at the end.
    #[inline(always)]
    fn token_at(&mut self, i: usize) -> Result<(u8, usize), Bad> {
        let c = *self.b.get(i).ok_or(Bad)?;
        if c > b' ' {
            return Ok((c, i));
        }
        let i = self.ws_from(i);
        Ok((*self.b.get(i).ok_or(Bad)?, i))
    }

    /// Consumes an object key and its colon, `c` being the byte at `i` (after whitespace); the
    /// offset after the colon.
    #[inline(always)]
    fn key_colon_at<const CONTROL: bool>(&mut self, i: usize, c: u8) -> Result<usize, Bad> {
        if c != b'"' {
            return Err(Bad);
        }
        let i = str_close::<CONTROL>(self.b, i + 1)?.0 + 1;
        match self.token_at(i)? {
            (b':', i) => Ok(i + 1),
            _ => Err(Bad),
        }
    }

    /// Consumes any value. One loop over the tokens with the offset in a local, the open
    /// containers kept as a stack of bits, strings skipped eight bytes at a time (escapes
    /// checked in place), whitespace looked for only where a byte is not above `b' '`; the
    /// same checks as [`Scan::object`], [`Scan::array_items`] and [`Scan::string`], nesting
    /// up to [`MAX_DEPTH`] counted from the containers the scanner is in. Errors: [`Bad`] when
    /// the input at the cursor does not start with a JSON value.
    pub fn value(&mut self) -> Result<(), Bad> {
        if self.control {
            self.value_in::<true>()
        } else {
            self.value_in::<false>()
        }
    }

    /// [`Scan::value`], strings tested for control bytes when `CONTROL` (the input holds one).
    fn value_in<const CONTROL: bool>(&mut self) -> Result<(), Bad> {
        let b = self.b;
        // levels this value may open
        let room = MAX_DEPTH.saturating_sub(self.depth);
        let mut i = self.pos;
        // open containers: `d` of them; bit k of `kinds`: the k-th from the innermost is an object
        let mut d: u32 = 0;
        let mut kinds: u128 = 0;
        'value: loop {
            let (c, at) = self.token_at(i)?;
            i = at;
            match c {
                b'"' => i = str_close::<CONTROL>(b, i + 1)?.0 + 1,
                b'{' | b'[' => {
                    if d >= room {
                        return Err(Bad);
                    }
                    d += 1;
                    let obj = c == b'{';
                    kinds = kinds << 1 | u128::from(obj);
                    let (c, at) = self.token_at(i + 1)?;
                    i = at;
                    if c == if obj { b'}' } else { b']' } {
                        i += 1;
                        d -= 1;
                        kinds >>= 1;
                    } else {
                        if obj {
                            i = self.key_colon_at::<CONTROL>(i, c)?;
                        }
                        continue 'value;
                    }
                }
                b't' => i = literal(b, i, b"true")?,
                b'f' => i = literal(b, i, b"false")?,
                b'n' => i = literal(b, i, b"null")?,
                _ => i = number(b, i)?,
            }
            // after a value: a separator, or the end of containers
            loop {
                if d == 0 {
                    self.pos = i;
                    return Ok(());
                }
                let (c, at) = self.token_at(i)?;
                i = at + 1;
                let obj = kinds & 1 == 1;
                match c {
                    b',' => {
                        if obj {
                            let (c, at) = self.token_at(i)?;
                            i = self.key_colon_at::<CONTROL>(at, c)?;
                        }
                        continue 'value;
                    }
                    b'}' if obj => {}
                    b']' if !obj => {}
                    _ => return Err(Bad),
                }
                d -= 1;
                kinds >>= 1;
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
    use proptest::prelude::*;

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
        // as deep as serde_json decodes
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        assert!(serde_json::from_str::<serde_json::Value>(&nested(127)).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&nested(128)).is_err());
        assert!(valid(&nested(127)) && !valid(&nested(128)));
        for pairs in [50, 63, 64, 65] {
            // arrays and objects alternating, 2 × pairs levels (the limit is 127 levels)
            let nested = format!("{}1{}", "[{\"a\":".repeat(pairs), "}]".repeat(pairs));
            assert_eq!(valid(&nested), 2 * pairs <= MAX_DEPTH as usize, "{pairs} pairs");
        }
        assert!(Scan::new(b"\"\xff\"").is_err());
    }

    /// A JSON value as text: keys and strings with escapes, surrogate pairs and non-ASCII
    /// characters, numbers of every shape, nesting.
    fn json_text() -> impl Strategy<Value = String> {
        let string = prop::collection::vec(
            prop_oneof![
                Just("a".to_string()),
                Just("f:metadata".to_string()),
                Just(r#"k:{\"type\":\"Ready\"}"#.to_string()),
                Just(r"\\\/\b\f\n\r\t".to_string()),
                Just(r"\u00e9\ud83d\ude00\u0041".to_string()),
                Just("é€😀".to_string()),
                Just("0123456789abcdef".to_string()),
            ],
            0..4,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()));
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            (-1e6f64..1e6).prop_map(|f| f.to_string()),
            Just("-0.5e+3".to_string()),
            Just("1E-7".to_string()),
            string.clone(),
        ];
        leaf.prop_recursive(6, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((string.clone(), inner), 0..6).prop_map(|m| format!("{{{}}}", m.into_iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(","))),
            ]
        })
    }

    /// `text` with whitespace after each `,`, `:`, `[` and `{` outside strings, and before each
    /// `]` and `}`.
    fn space_out(text: &str) -> Vec<u8> {
        let (mut out, mut in_string, mut escape) = (Vec::new(), false, false);
        for &c in text.as_bytes() {
            if in_string {
                out.push(c);
                (in_string, escape) = (escape || c != b'"', !escape && c == b'\\');
                continue;
            }
            if matches!(c, b']' | b'}') {
                out.push(b'\n');
            }
            out.push(c);
            match c {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => out.extend(b" \t\r"),
                _ => {}
            }
        }
        out
    }

    /// Bytes that change what JSON means.
    const INSERTS: &[u8] = b"\"\\{}[],: \n\r\t\x00\x01\x1fu0123456789-+.eEtrufalsn\x7fdx/";

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn accepts_exactly_what_serde_json_decodes(
            text in json_text(),
            levels in prop_oneof![Just(0usize), 0usize..8, 120usize..132],
            in_objects in any::<bool>(),
            spaced in any::<bool>(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>(), 0..3u8, prop_oneof![prop::sample::select(b"{}[],:\"\\ ".as_slice()), prop::sample::select(INSERTS)]), 0..5),
        ) {
            let (open, close) = if in_objects { (r#"{"k":"#, "}") } else { ("[", "]") };
            let text = format!("{}{text}{}", open.repeat(levels), close.repeat(levels));
            let mut bytes = if spaced { space_out(&text) } else { text.clone().into_bytes() };
            let spaced = spaced && bytes != text.as_bytes();
            let compact = !spaced && edits.is_empty();
            // each edit deletes, inserts or replaces a byte, half of them at a structural one
            for (at, structural, op, c) in &edits {
                let marks: Vec<usize> = bytes.iter().enumerate().filter(|(_, c)| b"{}[],:\"".contains(c)).map(|(i, _)| i).collect();
                let at = if *structural && !marks.is_empty() { marks[at.index(marks.len())] } else { at.index(bytes.len() + 1) };
                match op {
                    0 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    1 => bytes.insert(at, *c),
                    _ if at < bytes.len() => bytes[at] = *c,
                    _ => {}
                }
            }
            let Ok(text) = std::str::from_utf8(&bytes) else {
                prop_assert!(Scan::new(&bytes).is_err());
                return Ok(());
            };
            let mut s = Scan::new(bytes.as_slice()).expect("UTF-8");
            let ok = s.value().is_ok() && s.end().is_ok();
            if ok {
                prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(), "{text}");
            }
            // serde_json decodes numbers (refusing those beyond f64)
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(_) => prop_assert!(ok, "{text}"),
                Err(e) if e.to_string().contains("number out of range") => {}
                Err(e) => prop_assert!(!ok, "{text}: {e}"),
            }
            if compact && ok {
                prop_assert_eq!(s.pos, bytes.len());
                prop_assert!(!s.spaced());
            }
            if spaced && edits.is_empty() && ok {
                prop_assert!(s.spaced(), "{text}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 5_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// The word-wise search finds what a byte-wise one does, from any start, with the
        /// quote or backslash anywhere in a word or in the tail shorter than a word.
        #[test]
        fn quote_or_escape_is_found_as_bytewise(bytes in prop::collection::vec(prop_oneof![Just(b'"'), Just(b'\\'), Just(0x80u8), Just(0xffu8), Just(0u8), any::<u8>()], 0..40), from in 0usize..42) {
            let want = bytes.get(from..).and_then(|t| t.iter().position(|c| matches!(c, b'"' | b'\\'))).map(|p| from + p);
            prop_assert_eq!(find_quote_or_escape(&bytes, from), want);
        }
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
        // every byte at every place, after every byte: the lowest flag is the first special byte
        for c in 0..=255u8 {
            for fill in 0..=255u8 {
                for i in 0..8 {
                    let mut bytes = [fill; 8];
                    bytes[i] = c;
                    let w = u64::from_le_bytes(bytes);
                    let first = |special: &dyn Fn(u8) -> bool| bytes.iter().position(|x| special(*x)).map(|p| p as u32);
                    let lowest = |m: u64| (m != 0).then(|| m.trailing_zeros() / 8);
                    assert_eq!(lowest(special(w)), first(&|x| x == b'"' || x == b'\\' || x < 0x20), "{c:#x} at {i} in {fill:#x}");
                    assert_eq!(lowest(quote_or_escape(w)), first(&|x| x == b'"' || x == b'\\'), "{c:#x} at {i} in {fill:#x}");
                }
            }
        }
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
