//! `meta.k8s.io/v1` `Table` rendering, which kubectl asks for (`as=Table`) in `get`.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

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
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Kubernetes' short age format: `42s`, `5m`, `3h`, `12d`.
pub fn short_age(created: &str) -> String {
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

/// Column definitions of every table.
pub fn columns() -> Value {
    json!([
        {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
        {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp of the object.", "priority": 0},
    ])
}

/// One row for an object.
pub fn row(obj: &Arc<Value>, include: Include) -> Value {
    let meta = &obj["metadata"];
    let mut row = json!({
        "cells": [meta["name"], short_age(meta["creationTimestamp"].as_str().unwrap_or_default())],
    });
    match include {
        Include::None => {}
        Include::Metadata => {
            row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta});
        }
        Include::Object => row["object"] = (**obj).clone(),
    }
    row
}

/// A Table of objects.
pub fn table(
    objs: &[Arc<Value>],
    include: Include,
    resource_version: &str,
    cont: Option<&str>,
) -> Value {
    let rows: Vec<Value> = objs.iter().map(|o| row(o, include)).collect();
    let mut meta = json!({"resourceVersion": resource_version});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns(), "rows": rows})
}
