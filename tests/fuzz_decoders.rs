//! Property tests of the decoders that face the network: request bodies (JSON, YAML),
//! label and field selectors, continue tokens, global resourceVersions, patch documents,
//! protobuf bodies, CSRs, and what `fedctl join` reads (cluster-info and member kubeconfigs,
//! CA pins, bootstrap tokens). Random and hostile input must give a clean error (never a
//! panic or a hang), and what fedctl encodes must decode back to itself.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fedctl::api::selector::{FieldSelector, LabelSelector};
use fedctl::api::{body, paging, patch, protobuf};
use fedctl::cache::rv::{GlobalRv, Pos};
use fedctl::cli::join::{self, JoinError};
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Arbitrary JSON, nested a few levels, with the characters patches care about in keys.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool), any::<i64>().prop_map(|n| json!(n)), "[a-z/~0-9$.-]{0,8}".prop_map(Value::String),];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z/~$0-9.-]{0,6}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Selector-like text: mostly the selector alphabet, so parsing gets past the first character.
fn selector_text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9=!,.() /_-]{0,40}", ".{0,40}", "(in|notin|!|=|==|!=|,|\\(|\\)| |a|b|app|k8s.io/x){0,16}"]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn label_selectors_parse_or_refuse_cleanly(s in selector_text()) {
        if let Ok(sel) = LabelSelector::parse(&s) {
            // a parsed selector evaluates on any object without panicking
            let _ = sel.matches_object(&json!({"metadata": {"labels": {"app": "a", "b": ""}}}));
            let _ = sel.matches_object(&json!({}));
        }
    }

    #[test]
    fn field_selectors_parse_or_refuse_cleanly(s in selector_text()) {
        if let Ok(sel) = FieldSelector::parse(&s, &["spec.nodeName", "status.phase"]) {
            let _ = sel.matches(&json!({"metadata": {"name": "x"}, "spec": {"nodeName": 3}}));
        }
    }

    #[test]
    fn continue_tokens_round_trip(rv in 0i64..i64::MAX, key in "[a-z0-9][a-z0-9.-]{0,20}(/[a-z0-9][a-z0-9.-]{0,20})?") {
        prop_assume!(!key.split('/').any(|s| s == ".."));
        // the token resumes strictly after the last key: its start is the key and a NUL
        prop_assert_eq!(paging::decode(&paging::encode(rv, &key)).ok(), Some((rv, format!("{key}\u{0}"))));
    }

    #[test]
    fn continue_tokens_cannot_escape_the_listed_prefix(rv in 0i64..i64::MAX, key in "(/|\\.\\./|[a-z]{1,4}/\\.\\./)[a-z/.]{0,20}") {
        prop_assume!(key.starts_with('/') || key.split('/').any(|s| s == ".."));
        prop_assert!(paging::decode(&paging::encode_start(rv, &key)).is_err());
    }

    #[test]
    fn hostile_continue_tokens_are_refused_cleanly(token in ".{0,80}") {
        let _ = paging::decode(&token);
    }

    #[test]
    fn global_resource_versions_round_trip(m in prop::collection::btree_map("[a-z0-9][a-z0-9-]{0,20}", (any::<u64>(), any::<u32>()), 0..6)) {
        let g = GlobalRv(m.into_iter().map(|(k, (rv, sub))| (k, Pos { rv, sub })).collect::<BTreeMap<_, _>>());
        let back = GlobalRv::decode(&g.encode()).expect("own encoding decodes");
        prop_assert_eq!(back.0, g.0);
    }

    #[test]
    fn hostile_global_resource_versions_are_refused_cleanly(s in prop_oneof![".{0,60}", "g[A-Za-z0-9_-]{0,60}"]) {
        let _ = GlobalRv::decode(&s);
    }

    #[test]
    fn patches_of_any_shape_apply_or_refuse_cleanly(target in json_value(), doc in json_value()) {
        let _ = patch::merge_patch(&target, &doc);
        let _ = patch::json_patch(&target, &doc);
        let _ = patch::strategic_merge_patch(&target, &doc, "apps/v1", "Deployment");
        let _ = patch::strategic_merge_patch(&target, &doc, "v1", "Pod");
    }

    #[test]
    fn json_patch_operations_with_hostile_paths(target in json_value(), op in "(add|remove|replace|move|copy|test|x)", path in "(/[a-z~0-9-]{0,4}){0,4}", from in "(/[a-z~0-9-]{0,4}){0,3}", value in json_value()) {
        let ops = json!([{"op": op, "path": path, "from": from, "value": value}]);
        let _ = patch::json_patch(&target, &ops);
    }

    #[test]
    fn protobuf_bodies_decode_or_refuse_cleanly(tail in prop::collection::vec(any::<u8>(), 0..400), magic in any::<bool>()) {
        let mut body = if magic { b"k8s\0".to_vec() } else { Vec::new() };
        body.extend_from_slice(&tail);
        let _ = protobuf::decode_k8s_protobuf(&body);
    }

    #[test]
    fn csrs_decode_or_refuse_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300), pem in any::<bool>()) {
        let input = if pem {
            let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
            format!("-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n").into_bytes()
        } else {
            bytes
        };
        let _ = fedctl::pki::csr_subject(&input);
    }
}

/// Protobuf nesting far deeper than any Kubernetes object is refused, not followed down.
#[test]
fn deeply_nested_protobuf_is_refused() {
    // a RawExtension-like chain: field 1, length-delimited, nested 10,000 times
    let mut inner: Vec<u8> = Vec::new();
    for _ in 0..10_000 {
        let mut next = vec![0x0a];
        let mut n = inner.len();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                next.push(b);
                break;
            }
            next.push(b | 0x80);
        }
        next.extend_from_slice(&inner);
        inner = next;
        if inner.len() > 200_000 {
            break;
        }
    }
    let mut body = b"k8s\0".to_vec();
    body.extend_from_slice(&inner);
    assert!(protobuf::decode_k8s_protobuf(&body).is_err());
}

// ---------------------------------------------------------------------------------------
// Request bodies

const BODY_TYPES: &[&str] =
    &["application/json", "application/yaml", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json", "application/apply-patch+yaml", "text/yaml"];

/// Text in the JSON and YAML alphabets (anchors, aliases, tags, flow and block syntax).
fn structured_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,120}",
        "[a-z0-9:{}\\[\\],\"' \n&*!|>#~.-]{0,160}",
        "(\\{|\\}|\\[|\\]|,|:|\"a\"|\"k\"|1|-1e999|null|true| |\n|  |- |a: |k: |&x |\\*x|!!str |!!binary |<<: |---\n|\\.\\.\\.\n|\"\\\\ud800\"){0,40}",
    ]
}

/// An object rendered as JSON text whose keys may repeat: (text, expected value with the
/// last occurrence kept, repeated keys in order of their first repetition).
fn json_with_repeats() -> impl Strategy<Value = (String, Value, Vec<String>)> {
    prop::collection::vec(("[a-c]{1}", json_value()), 0..8).prop_map(|pairs| {
        let mut expected = serde_json::Map::new();
        let mut repeated: Vec<String> = Vec::new();
        let mut parts = Vec::new();
        for (k, v) in &pairs {
            if expected.contains_key(k) && !repeated.contains(k) {
                repeated.push(k.clone());
            }
            expected.insert(k.clone(), v.clone());
            parts.push(format!("{}:{}", serde_json::to_string(k).unwrap(), v));
        }
        (format!("{{{}}}", parts.join(",")), Value::Object(expected), repeated)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn request_bodies_decode_or_refuse_cleanly(ct in prop::sample::select(BODY_TYPES), text in structured_text(), raw in prop::collection::vec(any::<u8>(), 0..64), use_raw in any::<bool>()) {
        // raw bytes cover invalid UTF-8, which YAML bodies refuse and JSON strings reject
        let bytes = if use_raw { raw } else { text.into_bytes() };
        for find in [false, true] {
            match body::decode(ct, &bytes, find) {
                Ok(d) => prop_assert!(find || d.duplicates.is_empty()),
                Err(e) => prop_assert_eq!(e.code(), 400, "{}", e),
            }
        }
    }

    #[test]
    fn json_bodies_decode_as_serde_json_does(v in json_value()) {
        let text = serde_json::to_string(&v).unwrap();
        let d = body::decode("application/json", text.as_bytes(), true).expect("valid JSON decodes");
        prop_assert_eq!(&d.value, &v);
        prop_assert!(d.duplicates.is_empty());
        // the same value as YAML (serde_yaml's rendering) decodes to itself too
        let yaml = serde_yaml::to_string(&v).unwrap();
        let d = body::decode("application/yaml", yaml.as_bytes(), true).expect("valid YAML decodes");
        prop_assert_eq!(&d.value, &v, "{}", yaml);
        prop_assert!(d.duplicates.is_empty());
    }

    #[test]
    fn repeated_json_keys_keep_the_last_value_and_are_each_reported_once((text, expected, repeated) in json_with_repeats()) {
        let d = body::decode("application/json", text.as_bytes(), true).expect("valid JSON decodes");
        prop_assert_eq!(&d.value, &expected);
        let msgs: Vec<String> = d.duplicates.iter().map(body::Duplicate::message).collect();
        let want: Vec<String> = repeated.iter().map(|k| format!("duplicate field \"{k}\"")).collect();
        prop_assert_eq!(msgs, want);
        // nested one level down, the path names the parent
        let nested = format!("{{\"spec\":{{\"x\":[{text}]}}}}");
        let d = body::decode("application/json", nested.as_bytes(), true).unwrap();
        let paths: Vec<String> = d.duplicates.iter().map(|d| d.path.clone()).collect();
        prop_assert_eq!(paths, repeated.iter().map(|k| format!("spec.x[0].{k}")).collect::<Vec<_>>());
    }

    #[test]
    fn repeated_yaml_keys_are_reported_by_line(keys in prop::collection::vec("[a-c]", 0..10)) {
        let text: String = keys.iter().enumerate().map(|(i, k)| format!("{k}: {i}\n")).collect();
        let d = body::decode("application/yaml", text.as_bytes(), true).expect("valid YAML decodes");
        let mut want = Vec::new();
        let mut last = serde_json::Map::new();
        for (i, k) in keys.iter().enumerate() {
            if last.contains_key(k) {
                want.push(format!("line {}: key \"{k}\" already set in map", i + 1));
            }
            last.insert(k.clone(), json!(i));
        }
        let got: Vec<String> = d.duplicates.iter().map(body::Duplicate::message).collect();
        // past the first few, repetitions are reported by path instead of line
        prop_assert_eq!(got.len(), want.len());
        prop_assert_eq!(&got[..want.len().min(8)], &want[..want.len().min(8)]);
        let expected = if keys.is_empty() { Value::Null } else { Value::Object(last) };
        prop_assert_eq!(d.value, expected);
    }

    #[test]
    fn nesting_is_bounded_without_overflow(depth in prop_oneof![110usize..150, 1usize..400], object in any::<bool>(), yaml in any::<bool>()) {
        let (open, close) = if object { ("{\"a\":", "}") } else { ("[", "]") };
        let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
        let ct = if yaml { "application/yaml" } else { "application/json" };
        let r = body::decode(ct, text.as_bytes(), true);
        // serde_json refuses the 128th level, serde_yaml the 129th
        let limit = if yaml { 128 } else { 127 };
        prop_assert_eq!(r.is_ok(), depth <= limit, "depth {}: {:?}", depth, r.err());
    }
}

/// A YAML alias bomb, a 100k-deep document and a 2 MiB string: refused (the first two) or
/// decoded intact, quickly and without a stack overflow.
#[test]
fn hostile_bodies_are_refused_quickly() {
    let mut bomb = String::from("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..30 {
        let p = i - 1;
        bomb.push_str(&format!("a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"));
    }
    let started = Instant::now();
    let e = body::decode("application/yaml", bomb.as_bytes(), true).unwrap_err();
    assert_eq!(e.code(), 400);
    assert!(started.elapsed() < Duration::from_secs(10), "alias bomb took {:?}", started.elapsed());
    // aliases within the limit expand as YAML says
    let d = body::decode("application/yaml", b"a: &x {k: v}\nb: *x\n", true).unwrap();
    assert_eq!(d.value, json!({"a": {"k": "v"}, "b": {"k": "v"}}));

    for ct in ["application/json", "application/yaml"] {
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(body::decode(ct, deep.as_bytes(), true).unwrap_err().code(), 400, "{ct}");
    }
    let huge = "x".repeat(2 << 20);
    let d = body::decode("application/json", format!("{{\"s\":\"{huge}\"}}").as_bytes(), true).unwrap();
    assert_eq!(d.value["s"].as_str().map(str::len), Some(huge.len()));
    // a lone surrogate escape is invalid JSON text
    assert_eq!(body::decode("application/json", br#"{"s":"\ud800"}"#, true).unwrap_err().code(), 400);
}

// ---------------------------------------------------------------------------------------
// What `fedctl join` reads

/// A real CA, its pin, a client certificate it issued, and a kubeconfig using them.
struct Fixture {
    ca_pem: String,
    hash: String,
    cert_pem: String,
    key_pem: String,
    kubeconfig: String,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let ca = fedctl::pki::Ca::generate("fuzz-ca").unwrap();
        let (cert_pem, key_pem) = ca.issue_client("system:fedctl:agent:east", &["system:fedctl:agents"], Duration::from_secs(3600)).unwrap();
        let mut kc = Kubeconfig::single("east", "https://127.0.0.1:6443", ca.cert_pem(), AuthInfo::client_cert(&cert_pem, &key_pem));
        kc.users[0].user.token = Some("abcdef.0123456789abcdef".into());
        Fixture { ca_pem: ca.cert_pem().to_string(), hash: ca.hash(), cert_pem, key_pem, kubeconfig: kc.to_yaml() }
    })
}

/// cluster-info as the server publishes it, holding `kubeconfig`.
fn cluster_info(kubeconfig: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": {"kubeconfig": kubeconfig}})
}

/// Whatever a kubeconfig parsed from hostile text holds, using it never panics; and
/// cluster-info built from it yields a CA only when that CA matches the pin.
fn check_kubeconfig_text(text: &str) -> Result<(), TestCaseError> {
    if let Ok(kc) = Kubeconfig::from_yaml(text) {
        let _ = kc.current_cluster();
        let _ = kc.current_user();
        for c in &kc.clusters {
            if let Some(ca) = &c.cluster.certificate_authority_data {
                let _ = fedctl::pki::ca_cert_hash(ca);
                let _ = fedctl::pki::client_tls_config(ca, None);
            }
        }
        let _ = kc.to_yaml();
    }
    let f = fixture();
    match join::ca_from_cluster_info("https://127.0.0.1:1", &cluster_info(text), std::slice::from_ref(&f.hash)) {
        Ok(ca) => prop_assert_eq!(fedctl::pki::ca_cert_hash(&ca).unwrap(), f.hash.clone()),
        Err(JoinError::ClusterInfo { .. } | JoinError::CaHashMismatch { .. }) => {}
        Err(e) => prop_assert!(false, "unexpected error kind: {e}"),
    }
    Ok(())
}

/// A valid kubeconfig text with up to 4 edits (delete, insert, replace a range).
fn mutated_kubeconfig() -> impl Strategy<Value = String> {
    let edit = (any::<prop::sample::Index>(), 0usize..3, 0usize..40, "[a-zA-Z0-9:{}\\[\\],\"' \n&*!|>#=+/-]{0,6}");
    prop::collection::vec(edit, 1..5).prop_map(|edits| {
        let mut text = fixture().kubeconfig.clone().into_bytes();
        for (at, kind, len, ins) in edits {
            let pos = at.index(text.len() + 1);
            let end = (pos + len).min(text.len());
            match kind {
                0 => {
                    text.drain(pos..end);
                }
                1 => {
                    text.splice(pos..pos, ins.bytes());
                }
                _ => {
                    text.splice(pos..end, ins.bytes());
                }
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_kubeconfig_text_is_refused_or_used_cleanly(text in structured_text()) {
        check_kubeconfig_text(&text)?;
    }

    #[test]
    fn json_documents_as_kubeconfigs_are_refused_or_used_cleanly(v in json_value()) {
        check_kubeconfig_text(&v.to_string())?;
    }

    #[test]
    fn mutated_kubeconfigs_are_refused_or_used_cleanly(text in mutated_kubeconfig()) {
        check_kubeconfig_text(&text)?;
    }

    #[test]
    fn kubeconfigs_round_trip_what_matters(
        server in prop_oneof!["https://127\\.0\\.0\\.1:[0-9]{1,5}(/[a-z0-9./-]{0,20})?", ".{0,30}"],
        name in ".{0,20}",
        namespace in proptest::option::of(".{0,12}"),
        ca in "(.|\n){0,60}",
        cert in "(.|\n){0,60}",
        key in "(.|\n){0,60}",
        token in proptest::option::of(".{1,40}"),
        as_json in any::<bool>(),
    ) {
        let mut kc = Kubeconfig::single(&name, &server, &ca, AuthInfo::client_cert(&cert, &key));
        kc.users[0].user.token = token.clone();
        kc.contexts[0].context.namespace = namespace.clone();
        let text = if as_json { serde_json::to_string(&kc).unwrap() } else { kc.to_yaml() };
        let back = Kubeconfig::from_yaml(&text).expect("own encoding decodes");
        prop_assert_eq!(&back, &kc, "{}", text);
        prop_assert_eq!(&back.current_cluster().unwrap().server, &server);
        prop_assert_eq!(back.current_cluster().unwrap().ca_pem().unwrap(), Some(ca));
        let user = back.current_user().unwrap();
        prop_assert_eq!(user.client_cert_pem().unwrap(), Some(cert));
        prop_assert_eq!(user.client_key_pem().unwrap(), Some(key));
        prop_assert_eq!(user.token.clone(), token);
        prop_assert_eq!(back.context(&name).unwrap().namespace.clone(), namespace);
    }

    #[test]
    fn ca_pins_parse_or_refuse_cleanly(s in prop_oneof![".{0,80}", "\\s?sha256:[0-9a-fA-FxX]{62,66}\\s?", "(sha256|SHA256|sha1)?:?[0-9a-f]{64}"]) {
        if let Ok(h) = join::parse_ca_cert_hash(&s) {
            let hex = h.strip_prefix("sha256:").expect("canonical prefix");
            prop_assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{}", h);
            prop_assert_eq!(join::parse_ca_cert_hash(&h).unwrap(), h.clone());
            prop_assert_eq!(h, s.trim().to_ascii_lowercase());
        }
    }

    #[test]
    fn valid_ca_pins_are_accepted(bytes in prop::array::uniform32(any::<u8>()), upper in any::<bool>(), pad in "[ \t\n]{0,2}") {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let given = format!("{pad}sha256:{}{pad}", if upper { hex.to_ascii_uppercase() } else { hex.clone() });
        prop_assert_eq!(join::parse_ca_cert_hash(&given).unwrap(), format!("sha256:{hex}"));
    }

    #[test]
    fn bootstrap_tokens_parse_or_refuse_cleanly(s in prop_oneof![".{0,40}", "[a-z0-9A-Z]{5,7}\\.[a-z0-9A-Z]{15,17}", "[a-z0-9]{6}\\.[a-z0-9]{16}"]) {
        if let Some((id, secret)) = fedctl::pki::auth::parse_bootstrap_token(&s) {
            prop_assert_eq!(format!("{id}.{secret}"), s.clone());
            prop_assert!(id.len() == 6 && secret.len() == 16);
            prop_assert!(s.bytes().all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit()));
        } else {
            prop_assert!(!regex_like_token(&s), "{}", s);
        }
    }

    #[test]
    fn hostile_ca_pem_is_refused_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300), pem in any::<bool>()) {
        let text = if pem {
            let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
            format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        prop_assert!(fedctl::pki::ca_cert_hash(&text).is_err());
        prop_assert!(fedctl::pki::client_tls_config(&text, None).is_err());
    }
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, written out.
fn regex_like_token(s: &str) -> bool {
    let ok = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    matches!(s.split_once('.'), Some((a, b)) if ok(a, 6) && ok(b, 16))
}

/// A member kubeconfig (client certificate, or token) gives a client for its server; one
/// without credentials or CA is refused with a clear error.
#[test]
fn member_kubeconfigs_give_a_client_or_a_clear_error() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config");
    for server in ["https://127.0.0.1:6443", "https://127.0.0.1:1/base/", "https://[::1]:6443"] {
        let kc = Kubeconfig::single("m", server, &f.ca_pem, AuthInfo::client_cert(&f.cert_pem, &f.key_pem));
        kc.write(&path).unwrap();
        let c = fedctl::cli::client::Client::from_kubeconfig(&path).expect("usable kubeconfig");
        assert_eq!(c.server(), server.trim_end_matches('/'));
        let kc = Kubeconfig::single("m", server, &f.ca_pem, AuthInfo::bearer_token("abcdef.0123456789abcdef"));
        kc.write(&path).unwrap();
        fedctl::cli::client::Client::from_kubeconfig(&path).expect("token kubeconfig");
    }
    // no credentials, no CA, a CA that is not a certificate, a key that does not match
    let cases = [
        Kubeconfig::single("m", "https://127.0.0.1:1", &f.ca_pem, AuthInfo::default()),
        Kubeconfig::single("m", "https://127.0.0.1:1", "", AuthInfo::bearer_token("t")),
        Kubeconfig::single("m", "https://127.0.0.1:1", "not a certificate", AuthInfo::bearer_token("t")),
        Kubeconfig::single("m", "https://127.0.0.1:1", &f.ca_pem, AuthInfo::client_cert(&f.cert_pem, &f.ca_pem)),
    ];
    for kc in cases {
        kc.write(&path).unwrap();
        assert!(fedctl::cli::client::Client::from_kubeconfig(&path).is_err(), "{}", kc.to_yaml());
    }
    // and the file itself being hostile
    std::fs::write(&path, b"\xff\xfe not text").unwrap();
    assert!(fedctl::cli::client::Client::from_kubeconfig(&path).is_err());
}

/// cluster-info pins the CA: the right hash gives the CA, another hash or a document
/// without a CA is refused; an alias bomb or deep nesting is refused quickly.
#[test]
fn cluster_info_pins_the_ca_and_refuses_hostile_documents() {
    let f = fixture();
    let server = "https://127.0.0.1:1";
    let ca = join::ca_from_cluster_info(server, &cluster_info(&f.kubeconfig), std::slice::from_ref(&f.hash)).unwrap();
    assert_eq!(ca, f.ca_pem);
    let other = format!("sha256:{}", "0".repeat(64));
    assert!(matches!(join::ca_from_cluster_info(server, &cluster_info(&f.kubeconfig), &[other]), Err(JoinError::CaHashMismatch { .. })));
    assert!(matches!(join::ca_from_cluster_info(server, &json!({"data": {}}), std::slice::from_ref(&f.hash)), Err(JoinError::ClusterInfo { .. })));
    assert!(matches!(join::ca_from_cluster_info(server, &json!({"data": {"kubeconfig": 7}}), std::slice::from_ref(&f.hash)), Err(JoinError::ClusterInfo { .. })));
    let mut no_ca = Kubeconfig::single("m", server, "", AuthInfo::default());
    no_ca.clusters[0].cluster.certificate_authority_data = None;
    assert!(matches!(join::ca_from_cluster_info(server, &cluster_info(&no_ca.to_yaml()), std::slice::from_ref(&f.hash)), Err(JoinError::ClusterInfo { .. })));

    let mut bomb = String::from("apiVersion: v1\nkind: Config\npreferences:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..30 {
        let p = i - 1;
        bomb.push_str(&format!("  a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"));
    }
    let deep = format!("apiVersion: v1\npreferences:\n  x: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    for text in [bomb, deep] {
        let started = Instant::now();
        assert!(Kubeconfig::from_yaml(&text).is_err());
        assert!(matches!(join::ca_from_cluster_info(server, &cluster_info(&text), std::slice::from_ref(&f.hash)), Err(JoinError::ClusterInfo { .. })));
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    }
}
