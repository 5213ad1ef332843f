//! `limit`/`continue` paging tokens (mirrors kube-apiserver's etcd3 continue token).
//!
//! Wire format: base64url without padding of `{"v":"meta.k8s.io/v1","rv":<int>,"start":"<key>"}`
//! where `start` is the storage key relative to the listed prefix, followed by `\u0000` so the
//! next page begins strictly after the last returned key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::error::ApiError;

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

/// Encodes a token resuming after `last_key` (relative to the prefix) at revision `rv`.
pub fn encode(rv: i64, last_key_relative: &str) -> String {
    encode_start(rv, &format!("{last_key_relative}\u{0}"))
}

/// Encodes a token resuming at key `start` (relative to the prefix, inclusive) at revision
/// `rv`; `-1` = the latest revision.
pub fn encode_start(rv: i64, start: &str) -> String {
    let t = Token { v: "meta.k8s.io/v1".into(), rv, start: start.to_string() };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).expect("serializable"))
}

/// Decodes a token into `(rv, start key relative to the prefix)`.
/// Errors: 400 BadRequest for anything malformed (bad base64, JSON, version, or a key
/// that escapes the prefix).
pub fn decode(token: &str) -> Result<(i64, String), ApiError> {
    let bad = |why: &str| ApiError::BadRequest(format!("continue key is not valid: {why}"));
    let raw = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).map_err(|_| bad("illegal base64 data"))?;
    let t: Token = serde_json::from_slice(&raw).map_err(|_| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(bad("server does not recognize this encoded version"));
    }
    if t.start.is_empty() || t.start.starts_with('/') || t.start.split('/').any(|s| s == "..") {
        return Err(bad("path must not be empty or escape the prefix"));
    }
    Ok((t.rv, t.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let t = encode(42, "ns/name");
        assert_eq!(decode(&t).unwrap(), (42, "ns/name\u{0}".to_string()));
        assert!(decode("!!!").is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode(b"{}")).is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode(br#"{"v":"x","rv":1,"start":"a"}"#)).is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#)).is_err());
    }
}
