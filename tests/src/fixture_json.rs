//! Typed fields of a dump's JSON files: a missing or mistyped key fails naming the dump, the
//! file and the key.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::fixtures::Dump;

impl Dump {
    /// `json[key]` (read from the dump's `file`) as `T`.
    pub fn field<T: DeserializeOwned>(&self, file: &str, json: &Value, key: &str) -> T {
        let value = json.get(key).unwrap_or_else(|| panic!("dump {}: {file} has no `{key}`", self.label));
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("dump {}: {file}: `{key}`: {e}", self.label))
    }
}
