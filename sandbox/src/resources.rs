//! The resources the sandbox serves: the built-in table and those added by CRDs.

use serde::{Deserialize, Serialize};

/// One served resource (one group/version/plural), built in or from a CRD.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// API group, empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Kind of the list, e.g. `ConfigMapList`.
    pub list_kind: String,
    /// Plural resource name used in URLs, e.g. `configmaps`.
    pub plural: String,
    /// Singular name, lower case.
    pub singular: String,
    /// Namespaced (true) or cluster scoped (false).
    pub namespaced: bool,
    /// Short names (`cm`, `deploy`…).
    pub short_names: Vec<String>,
    /// Categories (`all`…).
    pub categories: Vec<String>,
    /// Whether a `/status` subresource is served.
    pub status_subresource: bool,
    /// `/scale` subresource paths, when served.
    pub scale: Option<ScaleSubresource>,
    /// Whether this is the storage version (CRDs) / preferred version.
    pub storage: bool,
    /// A CRD version's `additionalPrinterColumns`: the columns of `kubectl get` (Name and
    /// Age when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub printer_columns: Vec<PrinterColumn>,
    /// Where a CRD version's schema marks `x-kubernetes-embedded-resource`: property
    /// names, `[]` for a list's items and `{}` for a map's values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embedded: Vec<Vec<String>>,
    /// A CRD version's structural schema (`openAPIV3Schema`): custom resources are
    /// pruned, defaulted and validated with it (`schema.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<std::sync::Arc<serde_json::Value>>,
}

/// The paths of a schema marked `x-kubernetes-embedded-resource` (see
/// [`ResourceInfo::embedded`]).
pub(crate) fn embedded_paths(schema: &serde_json::Value) -> Vec<Vec<String>> {
    fn walk(
        s: &serde_json::Value,
        path: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
        depth: usize,
    ) {
        if depth > 32 || !s.is_object() {
            return;
        }
        if s["x-kubernetes-embedded-resource"] == true && !path.is_empty() {
            out.push(path.clone());
        }
        for (name, sub) in s["properties"].as_object().into_iter().flatten() {
            path.push(name.clone());
            walk(sub, path, out, depth + 1);
            path.pop();
        }
        for (step, sub) in [("[]", &s["items"]), ("{}", &s["additionalProperties"])] {
            path.push(step.to_string());
            walk(sub, path, out, depth + 1);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out, 0);
    out
}

/// One column of a CRD version's `additionalPrinterColumns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub format: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub priority: i64,
    /// A simple JSONPath into the object (`.status.phase`, `.spec.items[0].name`).
    pub json_path: String,
}

/// JSON paths of a `/scale` subresource (CRD `subresources.scale`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleSubresource {
    /// e.g. `.spec.replicas`.
    pub spec_replicas_path: String,
    /// e.g. `.status.replicas`.
    pub status_replicas_path: String,
    /// e.g. `.status.labelSelector`.
    pub label_selector_path: Option<String>,
}

impl ResourceInfo {
    /// `apiVersion` as written in objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `group/version` path prefix: `/api/v1` or `/apis/apps/v1`.
    pub fn path_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    all: bool,
}

const fn b(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        plural,
        namespaced,
        short,
        status,
        scale: false,
        all: false,
    }
}

const fn workload(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    scale: bool,
) -> Builtin {
    Builtin {
        group,
        version: "v1",
        kind,
        plural,
        namespaced: true,
        short,
        status: true,
        scale,
        all: true,
    }
}

const BUILTINS: &[Builtin] = &[
    b("", "v1", "Namespace", "namespaces", false, &["ns"], true),
    b("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
    b("", "v1", "Secret", "secrets", true, &[], false),
    Builtin {
        all: true,
        ..b("", "v1", "Service", "services", true, &["svc"], true)
    },
    Builtin {
        all: true,
        ..b("", "v1", "Pod", "pods", true, &["po"], true)
    },
    b("", "v1", "Event", "events", true, &["ev"], false),
    b(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        false,
    ),
    b(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
        true,
    ),
    b(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        &["pv"],
        true,
    ),
    b("", "v1", "Node", "nodes", false, &["no"], true),
    b("", "v1", "Endpoints", "endpoints", true, &["ep"], false),
    b(
        "",
        "v1",
        "LimitRange",
        "limitranges",
        true,
        &["limits"],
        false,
    ),
    b(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        &["quota"],
        true,
    ),
    workload("apps", "Deployment", "deployments", &["deploy"], true),
    workload("apps", "StatefulSet", "statefulsets", &["sts"], true),
    workload("apps", "DaemonSet", "daemonsets", &["ds"], false),
    workload("apps", "ReplicaSet", "replicasets", &["rs"], true),
    b(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        &[],
        false,
    ),
    workload("batch", "Job", "jobs", &[], false),
    workload("batch", "CronJob", "cronjobs", &["cj"], false),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        false,
    ),
    b(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        false,
    ),
    b(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        false,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
        true,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        &[],
        false,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
        false,
    ),
    b(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
        true,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
    ),
    b(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        &["sc"],
        false,
    ),
    b(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
        false,
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
        &[],
        false,
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
        &[],
        false,
    ),
    b(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
        &["hpa"],
        true,
    ),
    b(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        &[],
        false,
    ),
];

/// The built-in resources, in discovery order.
pub(crate) fn builtin_resources() -> Vec<ResourceInfo> {
    BUILTINS
        .iter()
        .map(|r| ResourceInfo {
            group: r.group.to_string(),
            version: r.version.to_string(),
            kind: r.kind.to_string(),
            list_kind: format!("{}List", r.kind),
            plural: r.plural.to_string(),
            singular: r.kind.to_ascii_lowercase(),
            namespaced: r.namespaced,
            short_names: r.short.iter().map(|s| s.to_string()).collect(),
            categories: if r.all {
                vec!["all".to_string()]
            } else {
                Vec::new()
            },
            status_subresource: r.status,
            scale: r.scale.then(|| ScaleSubresource {
                spec_replicas_path: ".spec.replicas".to_string(),
                status_replicas_path: ".status.replicas".to_string(),
                label_selector_path: Some(".status.selector".to_string()),
            }),
            printer_columns: Vec::new(),
            embedded: Vec::new(),
            schema: None,
            storage: true,
        })
        .collect()
}
