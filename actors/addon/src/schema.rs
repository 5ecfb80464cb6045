//! OpenAPI schemas of values (`openapi/config-values.yaml`, `openapi/values.yaml`), as
//! addon-operator applies them:
//!
//! - `additionalProperties: false` wherever an object schema lists `properties` and says
//!   nothing else (an object without `properties`, like `discovery: {type: object}`, stays
//!   open, as the documentation's example describes);
//! - `x-extend: {schema: config-values.yaml}` in the values schema copies `definitions`,
//!   `required`, `properties`, `patternProperties`, `title`, `description` and `x-*` keys
//!   from the config-values schema;
//! - `x-required-for-helm` joins `required` only for the check right before Helm;
//! - `default` fills missing keys: config-values defaults under the ConfigMap section,
//!   values defaults above it (and under memory patches);
//! - OpenAPI's `nullable: true` allows `null`.

use serde_json::{Map, Value, json};

/// The schemas of one scope (`global` or a module), compiled.
pub struct ValuesSchemas {
    scope: String,
    config: Option<Compiled>,
    values: Option<Compiled>,
    helm: Option<Compiled>,
    config_defaults: Value,
    values_defaults: Value,
}

struct Compiled {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for ValuesSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValuesSchemas")
            .field("scope", &self.scope)
            .field("config", &self.config.is_some())
            .field("values", &self.values.is_some())
            .finish()
    }
}

impl Default for ValuesSchemas {
    fn default() -> Self {
        ValuesSchemas::none("")
    }
}

/// Why a schema cannot be loaded, or values do not match it; naming the file or values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A schema file that is not a valid JSON schema.
    #[error("{file}: not a valid schema: {message}")]
    Invalid {
        /// `openapi/config-values.yaml` or `openapi/values.yaml`.
        file: &'static str,
        /// The validator's reason.
        message: String,
    },
    /// `x-extend` without a config-values schema to extend.
    #[error("openapi/values.yaml: x-extend names config-values.yaml, which does not exist")]
    ExtendsNothing,
    /// Values that break their schema.
    #[error("{what} do not match the schema: {}", .errors.join("; "))]
    Mismatch {
        /// `global config values`, `m values for Helm`, …
        what: String,
        /// The first violations, each with its path.
        errors: Vec<String>,
    },
}

fn compile(schema: &Value, file: &'static str) -> Result<Compiled, SchemaError> {
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(schema)
        .map_err(|e| SchemaError::Invalid {
            file,
            message: e.to_string(),
        })?;
    Ok(Compiled { validator })
}

/// Sets `additionalProperties: false` where `properties` are listed without it, and turns
/// `nullable: true` into a type that admits null, recursively.
fn prepare(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    if obj.get("nullable") == Some(&Value::Bool(true)) {
        match obj.get("type").cloned() {
            Some(Value::String(t)) => {
                obj.insert("type".into(), json!([t, "null"]));
            }
            Some(Value::Array(mut ts)) if !ts.contains(&json!("null")) => {
                ts.push(json!("null"));
                obj.insert("type".into(), Value::Array(ts));
            }
            _ => {}
        }
    }
    for key in ["properties", "patternProperties", "definitions"] {
        if let Some(Value::Object(props)) = obj.get_mut(key) {
            for v in props.values_mut() {
                prepare(v);
            }
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = obj.get_mut(key)
            && v.is_object()
        {
            prepare(v);
        }
    }
    for key in ["allOf", "anyOf", "oneOf", "items"] {
        if let Some(Value::Array(list)) = obj.get_mut(key) {
            for v in list {
                prepare(v);
            }
        }
    }
}

/// `x-extend`: the values schema extended with the config-values schema's fields.
fn extend(values: &mut Value, config: &Value) {
    let (Some(v), Some(c)) = (values.as_object_mut(), config.as_object()) else {
        return;
    };
    v.remove("x-extend");
    for key in ["definitions", "properties", "patternProperties"] {
        if let Some(Value::Object(from)) = c.get(key) {
            let into = v
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(into) = into.as_object_mut() {
                for (k, s) in from {
                    into.entry(k.clone()).or_insert_with(|| s.clone());
                }
            }
        }
    }
    if let Some(Value::Array(req)) = c.get("required") {
        let into = v
            .entry("required".to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(into) = into.as_array_mut() {
            for r in req {
                if !into.contains(r) {
                    into.push(r.clone());
                }
            }
        }
    }
    for (k, s) in c {
        if k == "title" || k == "description" || k.starts_with("x-") {
            v.entry(k.clone()).or_insert_with(|| s.clone());
        }
    }
}

/// The values a schema's `default`s describe (nested objects included), or `None`.
fn defaults_of(schema: &Value) -> Option<Value> {
    let own = schema.get("default").cloned();
    let nested: Map<String, Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter_map(|(k, s)| defaults_of(s).map(|d| (k.clone(), d)))
                .collect()
        })
        .unwrap_or_default();
    match (own, nested.is_empty()) {
        (Some(mut d), false) if d.is_object() => {
            // Fill the default object with nested defaults it lacks.
            let base = Value::Object(nested);
            fill_missing(&mut d, &base);
            Some(d)
        }
        (Some(d), _) => Some(d),
        (None, false) => Some(Value::Object(nested)),
        (None, true) => None,
    }
}

/// Adds to `target` every key of `defaults` it lacks, recursively into objects.
pub(crate) fn fill_missing(target: &mut Value, defaults: &Value) {
    let (Some(t), Some(d)) = (target.as_object_mut(), defaults.as_object()) else {
        return;
    };
    for (k, dv) in d {
        match t.get_mut(k) {
            Some(tv) => fill_missing(tv, dv),
            None => {
                t.insert(k.clone(), dv.clone());
            }
        }
    }
}

fn check(c: &Option<Compiled>, value: &Value, what: &str) -> Result<(), SchemaError> {
    let Some(c) = c else { return Ok(()) };
    let errors: Vec<String> = c
        .validator
        .iter_errors(value)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SchemaError::Mismatch {
            what: what.to_string(),
            errors,
        })
    }
}

impl ValuesSchemas {
    /// No schemas: everything is valid, no defaults.
    pub fn none(scope: &str) -> ValuesSchemas {
        ValuesSchemas {
            scope: scope.to_string(),
            config: None,
            values: None,
            helm: None,
            config_defaults: Value::Null,
            values_defaults: Value::Null,
        }
    }

    /// Compiles the schemas of `scope` (`global` or a module name); the arguments are the
    /// parsed `openapi/config-values.yaml` and `openapi/values.yaml`, when present.
    pub fn new(
        scope: &str,
        config_values: Option<Value>,
        values: Option<Value>,
    ) -> Result<ValuesSchemas, SchemaError> {
        let mut out = ValuesSchemas::none(scope);
        let config = config_values.map(|mut s| {
            prepare(&mut s);
            s
        });
        if let Some(c) = &config {
            out.config = Some(compile(c, "openapi/config-values.yaml")?);
            out.config_defaults = defaults_of(c).unwrap_or(Value::Null);
        }
        if let Some(mut v) = values {
            if v.get("x-extend").is_some() {
                match &config {
                    Some(c) => extend(&mut v, c),
                    None => {
                        return Err(SchemaError::ExtendsNothing);
                    }
                }
            }
            prepare(&mut v);
            out.values_defaults = defaults_of(&v).unwrap_or(Value::Null);
            let mut helm = v.clone();
            if let Some(Value::Array(extra)) = helm.get("x-required-for-helm").cloned()
                && let Some(obj) = helm.as_object_mut()
            {
                let req = obj
                    .entry("required".to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Some(req) = req.as_array_mut() {
                    for r in extra {
                        if !req.contains(&r) {
                            req.push(r);
                        }
                    }
                }
            }
            out.values = Some(compile(&v, "openapi/values.yaml")?);
            out.helm = Some(compile(&helm, "openapi/values.yaml")?);
        }
        Ok(out)
    }

    /// Whether any schema is loaded.
    pub fn is_empty(&self) -> bool {
        self.config.is_none() && self.values.is_none()
    }

    /// Layers static values, config-values defaults, config values and values defaults
    /// (memory patches go on top, by the caller).
    pub fn layer(&self, static_values: &Value, config: &Value) -> Value {
        let mut v = crate::values::layered([static_values]);
        fill_missing(&mut v, &self.config_defaults);
        crate::values::merge_into(&mut v, config);
        fill_missing(&mut v, &self.values_defaults);
        v
    }

    /// Checks config values (static values and defaults layered under the config section).
    pub fn validate_config(
        &self,
        static_values: &Value,
        config: &Value,
    ) -> Result<(), SchemaError> {
        if self.config.is_none() {
            return Ok(());
        }
        let mut v = crate::values::layered([static_values]);
        fill_missing(&mut v, &self.config_defaults);
        crate::values::merge_into(&mut v, config);
        check(&self.config, &v, &format!("{} config values", self.scope))
    }

    /// Checks effective values (after a hook run).
    pub fn validate_values(&self, values: &Value) -> Result<(), SchemaError> {
        check(&self.values, values, &format!("{} values", self.scope))
    }

    /// Checks values right before Helm (`required` plus `x-required-for-helm`).
    pub fn validate_helm(&self, values: &Value) -> Result<(), SchemaError> {
        check(
            &self.helm,
            values,
            &format!("{} values for Helm", self.scope),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_saphyr::from_str(s).unwrap_or(Value::Null)
    }

    const CONFIG: &str = "type: object\nrequired: [project, clusterName]\nproperties:\n  project: {type: string}\n  clusterName: {type: string}\n  clusterHostname: {type: string}\n  discovery: {type: object}\n";

    #[test]
    fn the_seed_examples_validate_as_documented() {
        let s = ValuesSchemas::new("global", Some(yaml(CONFIG)), None).unwrap();
        let err = s
            .validate_config(&json!({}), &json!({"project": "myProject"}))
            .unwrap_err();
        assert!(err.to_string().contains("clusterName"), "{err}");
        let ok = json!({"project": "p", "clusterName": "c", "discovery": {"anything": 1}});
        assert_eq!(s.validate_config(&json!({}), &ok), Ok(()));
        let mut bad = ok.clone();
        bad["clusterHostname"] = json!({});
        let err = s.validate_config(&json!({}), &bad).unwrap_err();
        assert!(err.to_string().contains("/clusterHostname"), "{err}");
        let mut extra = ok.clone();
        extra["unknown"] = json!(1);
        assert!(
            s.validate_config(&json!({}), &extra).is_err(),
            "additionalProperties is false by default"
        );
    }

    #[test]
    fn x_extend_defaults_and_required_for_helm() {
        let values = yaml(
            "x-extend:\n  schema: config-values.yaml\ntype: object\nx-required-for-helm: [param1]\nproperties:\n  param1: {type: string}\n  discovery:\n    type: object\n    default: {}\n  level:\n    type: string\n    nullable: true\n    default: info\n",
        );
        let s = ValuesSchemas::new("global", Some(yaml(CONFIG)), Some(values)).unwrap();
        let layered = s.layer(&json!({}), &json!({"project": "p", "clusterName": "c"}));
        assert_eq!(
            layered,
            json!({"project": "p", "clusterName": "c", "discovery": {}, "level": "info"})
        );
        assert_eq!(s.validate_values(&layered), Ok(()));
        let err = s.validate_helm(&layered).unwrap_err();
        assert!(err.to_string().contains("param1"), "{err}");
        let mut with = layered.clone();
        with["param1"] = json!("x");
        with["level"] = Value::Null;
        assert_eq!(s.validate_helm(&with), Ok(()));
        // The extended schema carries the config schema's required fields.
        assert!(s.validate_values(&json!({"project": "p"})).is_err());
    }
}
