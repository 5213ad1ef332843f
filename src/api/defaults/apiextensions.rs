//! `apiextensions.k8s.io/v1` CustomResourceDefinition defaults:
//! staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1/defaults.go.

use serde_json::{json, Value};

use super::{child, default, member, path, Obj};

/// SetDefaults_CustomResourceDefinitionSpec: `names.singular` (the kind in lower case),
/// `names.listKind` (`<Kind>List`), `conversion.strategy` None, a webhook conversion's
/// service port 443 (SetDefaults_ServiceReference).
pub(super) fn crd(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    if let Some(names) = child(spec, "names") {
        let kind = names.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        super::default_zero(names, "singular", kind.to_lowercase());
        if !kind.is_empty() {
            super::default_zero(names, "listKind", format!("{kind}List"));
        }
    }
    default(spec, "conversion", json!({"strategy": "None"}));
    if let Some(s) = path(spec, &["conversion", "webhook", "clientConfig"]).and_then(|c| child(c, "service")) {
        default(s, "port", 443);
    }
}
