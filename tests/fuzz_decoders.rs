//! Property tests of the decoders that face the network: label and field selectors, continue
//! tokens, global resourceVersions, patch documents, protobuf bodies and CSRs. Random and
//! hostile input must give a clean error (never a panic), and what fedctl encodes must decode
//! back to itself.

use std::collections::BTreeMap;

use fedctl::api::selector::{FieldSelector, LabelSelector};
use fedctl::api::{paging, patch, protobuf};
use fedctl::cache::rv::{GlobalRv, Pos};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Arbitrary JSON, nested a few levels, with the characters patches care about in keys.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z/~0-9$.-]{0,8}".prop_map(Value::String),
    ];
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
