//! The global resourceVersion: one position per member cluster, as one opaque URL-safe string.
//!
//! Format (version 1): the letter `g` followed by base64url (no padding) of the cluster
//! entries sorted by name, joined by `,`, each `name=rv` or `name=rv.sub`:
//! - `name`: the Cluster's name (a DNS label: no `=`, `,` or `.`-free requirement is not
//!   needed because the split is on the last `=`);
//! - `rv`: the member's resourceVersion (a decimal u64, as etcd-backed apiservers give);
//! - `sub`: an index that orders several events the cache derives from one member
//!   resourceVersion (the ADDED/MODIFIED/DELETED difference of a relist, the DELETED events of
//!   a leaving cluster); omitted when 0.
//!
//! Zero members encode as `g`. Example: `{a: 120, b: 7.3}` → `g` + base64url(`a=120,b=7.3`).
//!
//! A store's position of a cluster always stops at a complete member state (a relist's
//! derived events are recorded at once), so stores check a requested position against their
//! own at member-resourceVersion granularity: `rv.4294967295` means "everything derived from
//! member state `rv`" and is what the MUX over `fedctl cache` processes (whose derived
//! sub-indexes differ: each holds other objects) uses as a snapshot.

use std::collections::BTreeMap;

use base64::Engine;

use super::CacheError;

/// One cluster's position in its own event stream: (member resourceVersion, sub-index).
/// Ordered lexicographically; every event of a cluster has a larger position than the last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// The member's resourceVersion.
    pub rv: u64,
    /// Orders events derived from one member resourceVersion (0 for a member's own events).
    pub sub: u32,
}

impl Pos {
    /// A member event's position.
    pub fn member(rv: u64) -> Pos {
        Pos { rv, sub: 0 }
    }
}

/// A global resourceVersion: cluster name → position (see the module docs for the wire form).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GlobalRv(pub BTreeMap<String, Pos>);

impl GlobalRv {
    /// Whether `self` is at or after `other` in every cluster of `other` (a cluster `self`
    /// lacks is not covered).
    pub fn covers(&self, other: &GlobalRv) -> bool {
        other.0.iter().all(|(c, p)| self.0.get(c).is_some_and(|q| q >= p))
    }

    /// Moves `self` up to `other` in every cluster (the per-cluster maximum of the two).
    pub fn join(&mut self, other: &GlobalRv) {
        for (c, p) in &other.0 {
            let e = self.0.entry(c.clone()).or_default();
            *e = (*e).max(*p);
        }
    }

    /// The wire form.
    pub fn encode(&self) -> String {
        encode_positions(self.0.iter().map(|(c, p)| (c.as_str(), *p)))
    }

    /// Parses the wire form. Errors: [`CacheError::MalformedRv`] (rendered as 400).
    pub fn decode(s: &str) -> Result<GlobalRv, CacheError> {
        let bad = || CacheError::MalformedRv(s.chars().take(100).collect());
        let body = s.strip_prefix('g').ok_or_else(bad)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).map_err(|_| bad())?;
        let text = String::from_utf8(raw).map_err(|_| bad())?;
        let mut map = BTreeMap::new();
        if text.is_empty() {
            return Ok(GlobalRv(map));
        }
        for entry in text.split(',') {
            let (name, pos) = entry.rsplit_once('=').ok_or_else(bad)?;
            if name.is_empty() {
                return Err(bad());
            }
            let (rv, sub) = match pos.split_once('.') {
                Some((rv, sub)) => (rv, sub.parse::<u32>().map_err(|_| bad())?),
                None => (pos, 0),
            };
            let rv = rv.parse::<u64>().map_err(|_| bad())?;
            if map.insert(name.to_string(), Pos { rv, sub }).is_some() {
                return Err(bad());
            }
        }
        // only the canonical form (the one `encode` gives) is accepted: no leading zeros,
        // explicit `.0`, unsorted entries or other spellings of the same position
        let g = GlobalRv(map);
        if g.encode() != s {
            return Err(bad());
        }
        Ok(g)
    }
}

/// The wire form of the global resourceVersion of `positions` (cluster name → position, in
/// name order, each name once): what [`GlobalRv::encode`] gives for the same map.
pub fn encode_positions<'a>(positions: impl IntoIterator<Item = (&'a str, Pos)>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for (i, (name, p)) in positions.into_iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(name);
        let _ = write!(s, "={}", p.rv);
        if p.sub > 0 {
            let _ = write!(s, ".{}", p.sub);
        }
    }
    let mut out = String::with_capacity(1 + s.len().div_ceil(3) * 4);
    out.push('g');
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(s, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Covering is per cluster of the other position (a cluster missing from `self` is not
    /// covered); joining takes each cluster's later position.
    #[test]
    fn covers_and_join() {
        let g = |at: &[(&str, u64, u32)]| GlobalRv(at.iter().map(|(c, rv, sub)| (c.to_string(), Pos { rv: *rv, sub: *sub })).collect());
        assert!(g(&[("a", 5, 0), ("b", 3, 1)]).covers(&g(&[("a", 5, 0), ("b", 3, 0)])));
        assert!(!g(&[("a", 5, 0)]).covers(&g(&[("a", 4, 0), ("b", 1, 0)])), "b missing");
        assert!(!g(&[("a", 5, 0), ("b", 3, 0)]).covers(&g(&[("b", 3, 1)])));
        assert!(g(&[("a", 1, 0)]).covers(&GlobalRv::default()));
        let mut j = g(&[("a", 5, 0), ("b", 3, 0)]);
        j.join(&g(&[("a", 4, 0), ("b", 3, 2), ("c", 1, 0)]));
        assert_eq!(j, g(&[("a", 5, 0), ("b", 3, 2), ("c", 1, 0)]));
    }

    #[test]
    fn round_trip_and_malformed() {
        let mut g = GlobalRv::default();
        assert_eq!(GlobalRv::decode(&g.encode()).unwrap(), g);
        g.0.insert("member-a".into(), Pos::member(120));
        g.0.insert("b".into(), Pos { rv: 7, sub: 3 });
        let s = g.encode();
        assert!(s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_eq!(GlobalRv::decode(&s).unwrap(), g);
        let b64 = |t: &str| format!("g{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t));
        let non_canonical = [b64("a=0120"), b64("a=120.0"), b64("b=1,a=2"), b64("a=+1"), format!("{s}A"), format!("{s}=")];
        for bad in ["", "12", "g!!", "gYT0", "x", "gYQ"].into_iter().chain(non_canonical.iter().map(String::as_str)) {
            assert!(GlobalRv::decode(bad).is_err(), "{bad}");
        }
    }
}
