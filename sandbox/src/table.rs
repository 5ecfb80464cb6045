//! `meta.k8s.io/v1` `Table` rendering, which kubectl asks for (`as=Table`) in `get`.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::resources::{PrinterColumn, ResourceInfo};

/// What a Table row embeds (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl Include {
    /// Parses `includeObject`.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub(crate) fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Kubernetes' short age format: `42s`, `5m`, `3h`, `12d`.
pub(crate) fn short_age(created: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(created) else {
        return "<unknown>".into();
    };
    let secs = SystemTime::now()
        .duration_since(t)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// The Name column's description, ObjectMeta's, as kube-apiserver gives it.
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// The column definitions of a table of `info`: Name, then a CRD version's printer
/// columns, or Name and Age when it has none (as kube-apiserver).
pub fn columns(info: &ResourceInfo) -> Value {
    let name = json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0});
    if info.printer_columns.is_empty() {
        return json!([
            name,
            {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp of the object.", "priority": 0},
        ]);
    }
    let mut out = vec![name];
    out.extend(info.printer_columns.iter().map(|c| {
        let description = if c.description.is_empty() {
            format!("Custom resource definition column (in JSONPath format): {}", c.json_path)
        } else {
            c.description.clone()
        };
        json!({"name": c.name, "type": c.type_, "format": c.format, "description": description, "priority": c.priority})
    }));
    Value::Array(out)
}

/// The value at a simple JSONPath (`.a.b`, `.a[0].b`, `{.a.b}`); `None` when absent or
/// when the path is of a form not read here.
fn at_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let mut here = obj;
    for part in path.strip_prefix('.')?.split('.') {
        let (field, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            here = here.get(field)?;
        }
        let mut rest = indices;
        while let Some(open) = rest.strip_prefix('[') {
            let close = open.find(']')?;
            let index: usize = open[..close].parse().ok()?;
            here = here.get(index)?;
            rest = &open[close + 1..];
        }
    }
    Some(here)
}

/// One cell of a printer column: a `date` as an age, anything else as it is; absent
/// values are null (kubectl prints `<none>`).
fn cell(obj: &Value, column: &PrinterColumn) -> Value {
    match at_path(obj, &column.json_path) {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(t)) if column.type_ == "date" => json!(short_age(t)),
        Some(v) => v.clone(),
    }
}

/// One row for an object.
pub fn row(obj: &Arc<Value>, info: &ResourceInfo, include: Include) -> Value {
    let meta = &obj["metadata"];
    let cells: Vec<Value> = if info.printer_columns.is_empty() {
        vec![
            meta["name"].clone(),
            json!(short_age(
                meta["creationTimestamp"].as_str().unwrap_or_default()
            )),
        ]
    } else {
        std::iter::once(meta["name"].clone())
            .chain(info.printer_columns.iter().map(|c| cell(obj, c)))
            .collect()
    };
    let mut row = json!({ "cells": cells });
    match include {
        Include::None => {}
        Include::Metadata => {
            row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta});
        }
        Include::Object => row["object"] = (**obj).clone(),
    }
    row
}

/// A Table of objects of `info`.
pub fn table(
    objs: &[Arc<Value>],
    info: &ResourceInfo,
    include: Include,
    resource_version: &str,
    cont: Option<&str>,
) -> Value {
    let rows: Vec<Value> = objs.iter().map(|o| row(o, info, include)).collect();
    let mut meta = json!({"resourceVersion": resource_version});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns(info), "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, type_: &str, path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        }
    }

    #[test]
    fn printer_columns_read_their_paths() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2000-01-01T00:00:00Z"},
            "spec": {"type": "mock", "items": [{"n": 3}]}, "status": {"phase": "Succeeded"}});
        assert_eq!(
            cell(&obj, &column("Type", "string", ".spec.type")),
            json!("mock")
        );
        assert_eq!(
            cell(&obj, &column("Phase", "string", "{.status.phase}")),
            json!("Succeeded")
        );
        assert_eq!(
            cell(&obj, &column("N", "integer", ".spec.items[0].n")),
            json!(3)
        );
        assert_eq!(
            cell(&obj, &column("Export", "string", ".status.exportRef.name")),
            Value::Null
        );
        let age = cell(&obj, &column("Age", "date", ".metadata.creationTimestamp"));
        assert!(age.as_str().is_some_and(|a| a.ends_with('d')), "{age}");
    }
}
