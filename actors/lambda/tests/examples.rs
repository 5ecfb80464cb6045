//! metacontroller's examples (`examples/` of its repository) in-process, their hooks
//! answered by the ports in `bosun_lambda::fakes::examples` (which the end to end tests in
//! `tests/lambda/examples.rs` serve too): each plays the scenario its users rely on and
//! checks what they would see in the cluster. The CatSet pattern and the garbage
//! collector's cascade run end to end only.
//!
//! Run: `cargo test -p bosun-lambda --test examples`.

mod world;

use bosun_lambda::fakes::examples;
use bosun_lambda::ports::HookType::{Customize, Finalize, Sync};
use serde_json::{Value, json};

use world::{Crd, World, keys, owned_by, str_of};

/// A CompositeController over `example.com/v1 <plural>` with `children` (InPlace) and
/// the given hooks (`customize` and `v2` as asked).
fn composite(
    name: &str,
    plural: &str,
    children: &[(&str, &str)],
    customize: bool,
    v2: bool,
) -> Value {
    let hook = |kind: &str| {
        let mut h = json!({"webhook": {"url": format!("http://hooks.test/{name}/{kind}")}});
        if v2 {
            h["version"] = json!("v2");
        }
        h
    };
    let mut hooks = json!({"sync": hook("sync")});
    if customize {
        hooks["customize"] = hook("customize");
    }
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
            "childResources": children.iter().map(|(api_version, resource)| json!({
                "apiVersion": api_version, "resource": resource,
                "updateStrategy": {"method": "InPlace"}
            })).collect::<Vec<_>>(),
            "hooks": hooks
        }
    })
}

/// configmappropagation: a cluster-scoped parent copies one ConfigMap (a related object
/// named by the customize hook) into the namespaces it lists. Parents outside the
/// controller's `parentResource.labelSelector` are left alone; a change of the source
/// reaches the copies; an edited copy is put back, keys of others kept; once the source
/// is gone the copies go too.
#[tokio::test]
async fn configmappropagation_copies_a_configmap_into_listed_namespaces() {
    let w = World::start(&[Crd("ConfigMapPropagation", "configmappropagations", false)]).await;
    let name = "configmap-propagation-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::configmappropagation_customize(req))
    });
    w.answer(name, Sync, |req| {
        Ok(examples::configmappropagation_sync(req))
    });
    for ns in ["original", "one", "two", "three", "four"] {
        w.namespace(ns, json!({}));
    }
    w.configmap(
        "original",
        "settings",
        json!({}),
        json!({"some": "value", "other": "value"}),
    );
    let mut controller = composite(
        name,
        "configmappropagations",
        &[("v1", "configmaps")],
        true,
        false,
    );
    controller["spec"]["parentResource"]["labelSelector"] =
        json!({"matchLabels": {"version": "v1"}});
    w.controller(controller);
    let parents = "configmappropagations";
    w.put(
        parents,
        json!({"apiVersion": "example.com/v1", "kind": "ConfigMapPropagation",
               "metadata": {"name": "settings-propagation", "labels": {"version": "v1"}},
               "spec": {"sourceName": "settings", "sourceNamespace": "original",
                        "targetNamespaces": ["one", "two", "three"]}}),
    );
    w.put(
        parents,
        json!({"apiVersion": "example.com/v1", "kind": "ConfigMapPropagation",
               "metadata": {"name": "settings-propagation-unmanaged", "labels": {"version": "v2"}},
               "spec": {"sourceName": "settings", "sourceNamespace": "original",
                        "targetNamespaces": ["four"]}}),
    );
    let copy = |ns: &str| w.get("configmaps", ns, "settings");
    w.until("copies in one, two and three", || {
        ["one", "two", "three"]
            .iter()
            .all(|ns| copy(ns).is_some_and(|c| c["data"]["some"] == "value"))
    })
    .await;
    let parent = || w.get(parents, "", "settings-propagation");
    w.until("status.actual_copies = 3", || {
        parent().is_some_and(|p| {
            p["status"]["actual_copies"] == 3 && p["status"]["expected_copies"] == 3
        })
    })
    .await;
    assert!(owned_by(
        &copy("two").expect("copy"),
        &parent().expect("parent")
    ));
    // The customize hook saw the parent and its controller.
    let customize = w.requests(name, Customize);
    assert_eq!(customize[0]["controller"]["kind"], "CompositeController");
    assert_eq!(
        customize[0]["parent"]["metadata"]["name"],
        "settings-propagation"
    );
    // The parent outside parentResource.labelSelector is not touched.
    let unmanaged_seen = |hook| {
        w.requests(name, hook)
            .iter()
            .any(|r| r["parent"]["metadata"]["name"] == "settings-propagation-unmanaged")
    };
    assert!(!unmanaged_seen(Sync) && !unmanaged_seen(Customize));
    assert!(copy("four").is_none());
    // Labelled into the selector later: now it is managed.
    w.edit(parents, "", "settings-propagation-unmanaged", |p| {
        p["metadata"]["labels"]["version"] = json!("v1")
    });
    w.until("the copy in four once the parent is selected", || {
        copy("four").is_some()
    })
    .await;

    // A change of the source (a related object) reaches every copy.
    w.edit("configmaps", "original", "settings", |c| {
        c["data"]["some"] = json!("changed")
    });
    w.until("the copies follow the source", || {
        ["one", "two", "three"]
            .iter()
            .all(|ns| copy(ns).is_some_and(|c| c["data"]["some"] == "changed"))
    })
    .await;
    // Someone edits a copy: the propagated key is put back, their own key stays (the
    // 3-way apply leaves fields it never set alone).
    w.edit("configmaps", "one", "settings", |c| {
        c["data"]["some"] = json!("edited");
        c["data"]["mine"] = json!("kept");
    });
    w.until("the edited copy put back, the extra key kept", || {
        copy("one").is_some_and(|c| c["data"]["some"] == "changed" && c["data"]["mine"] == "kept")
    })
    .await;
    // A namespace taken off the list loses its copy.
    w.edit(parents, "", "settings-propagation", |p| {
        p["spec"]["targetNamespaces"] = json!(["one", "two"])
    });
    w.until(
        "the copy in three removed, status.expected_copies = 2",
        || {
            copy("three").is_none()
                && parent().is_some_and(|p| {
                    p["status"]["actual_copies"] == 2 && p["status"]["expected_copies"] == 2
                })
        },
    )
    .await;
    // The source deleted: the copies are cleaned up.
    w.delete("configmaps", "original", "settings");
    w.until("the copies removed", || {
        ["one", "two", "three", "four"]
            .iter()
            .all(|ns| copy(ns).is_none())
    })
    .await;
}

/// globalconfigmap: a cluster-scoped parent copies a ConfigMap into every namespace (all
/// Namespaces are related objects, `labelSelector: {}`); a namespace created later gets
/// its copy too. v1 keys of a cluster-scoped parent: `ns/name` for namespaced objects,
/// the bare name for cluster-scoped ones.
#[tokio::test]
async fn globalconfigmap_copies_a_configmap_into_every_namespace() {
    let w = World::start(&[Crd("GlobalConfigMap", "globalconfigmaps", false)]).await;
    let name = "globalconfigmap-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::globalconfigmap_customize(req))
    });
    w.answer(name, Sync, |req| Ok(examples::globalconfigmap_sync(req)));
    for ns in ["global", "first", "second"] {
        w.namespace(ns, json!({}));
    }
    w.configmap(
        "global",
        "globalsettings",
        json!({}),
        json!({"some": "value"}),
    );
    w.controller(composite(
        name,
        "globalconfigmaps",
        &[("v1", "configmaps")],
        true,
        false,
    ));
    w.put(
        "globalconfigmaps",
        json!({"apiVersion": "example.com/v1", "kind": "GlobalConfigMap",
               "metadata": {"name": "globalsettings"},
               "spec": {"sourceName": "globalsettings", "sourceNamespace": "global"}}),
    );
    let copy = |ns: &str| w.get("configmaps", ns, "globalsettings");
    w.until(
        "copies in first, second and default, and the status",
        || {
            ["first", "second", "default"]
                .iter()
                .all(|ns| copy(ns).is_some())
                && w.get("globalconfigmaps", "", "globalsettings")
                    .is_some_and(|p| p["status"]["working"] == "fine")
        },
    )
    .await;
    let last = w.requests(name, Sync);
    let related = &last.last().expect("a sync")["related"];
    assert_eq!(
        keys(&related["ConfigMap.v1"]),
        ["global/globalsettings"],
        "{related}"
    );
    assert!(keys(&related["Namespace.v1"]).contains(&"first".to_string()));
    // A namespace created later gets its copy (a related object appeared).
    w.namespace("third", json!({}));
    w.until("a copy in the new namespace", || {
        copy("third").is_some_and(|c| c["data"]["some"] == "value")
    })
    .await;
    assert!(copy("global").is_some_and(|c| c["metadata"]["ownerReferences"].is_null()));
}

/// secretpropagation with v2 hooks: the Secrets to share are chosen by label in the
/// namespaces a namespaceSelector picks; the targets are the namespaces a label selector
/// picks. Labelling a namespace adds a target; unlabelling removes its copies.
#[tokio::test]
async fn secretpropagation_shares_selected_secrets_into_selected_namespaces() {
    let w = World::start(&[Crd("SecretPropagation", "secretpropagations", false)]).await;
    let name = "secret-propagation-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::secretpropagation_customize(req))
    });
    w.answer(name, Sync, |req| Ok(examples::secretpropagation_sync(req)));
    w.namespace("omega", json!({"secrets": "source"}));
    w.namespace("elsewhere", json!({}));
    w.namespace("alpha", json!({"propagate": "true"}));
    w.namespace("beta", json!({"propagate": "true"}));
    w.namespace("gamma", json!({}));
    for (ns, secret) in [("omega", "shareable"), ("elsewhere", "private")] {
        // The same label in a namespace the namespaceSelector does not pick.
        w.put(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": secret, "namespace": ns, "labels": {"share": "yes"}},
                   "data": {"some": "dmFsdWUK"}}),
        );
    }
    w.controller(composite(
        name,
        "secretpropagations",
        &[("v1", "secrets")],
        true,
        true,
    ));
    w.put(
        "secretpropagations",
        json!({"apiVersion": "example.com/v1", "kind": "SecretPropagation",
               "metadata": {"name": "secret-propagation"},
               "spec": {"secretSelector": {"matchLabels": {"share": "yes"}},
                        "sourceNamespaceSelector": {"matchLabels": {"secrets": "source"}},
                        "targetNamespaceLabelSelector": {"matchLabels": {"propagate": "true"}}}}),
    );
    let secret = |ns: &str, name: &str| w.get("secrets", ns, name);
    w.until("the secret in alpha and beta, status working: fine", || {
        ["alpha", "beta"]
            .iter()
            .all(|ns| secret(ns, "shareable").is_some())
            && w.get("secretpropagations", "", "secret-propagation")
                .is_some_and(|p| p["status"]["working"] == "fine")
    })
    .await;
    let parent = w
        .get("secretpropagations", "", "secret-propagation")
        .expect("parent");
    // v2 keys: `namespace/name`; the secret outside the selected namespaces is not related.
    assert_eq!(parent["status"]["secrets"], json!(["omega/shareable"]));
    assert!(secret("gamma", "shareable").is_none());
    assert!(secret("alpha", "private").is_none());

    // gamma labelled: a target more. beta unlabelled: its copy goes.
    w.edit("namespaces", "", "gamma", |n| {
        n["metadata"]["labels"] = json!({"propagate": "true"})
    });
    w.until("the secret in gamma", || {
        secret("gamma", "shareable").is_some()
    })
    .await;
    w.edit("namespaces", "", "beta", |n| {
        n["metadata"]["labels"] = json!({})
    });
    w.until("the copy in beta removed", || {
        secret("beta", "shareable").is_none()
    })
    .await;
    assert!(secret("alpha", "shareable").is_some());
}

/// secretpropagation as upstream runs it (v1 hooks): one Secret named in the parent is
/// copied into the namespaces its label selector picks; deleting the parent takes the
/// copies with it (they are its children), the source stays.
#[tokio::test]
async fn secretpropagation_v1_copies_a_secret_into_labelled_namespaces() {
    let w = World::start(&[Crd("SecretPropagation", "secretpropagations", false)]).await;
    let name = "secret-propagation-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::secretpropagation_v1_customize(req))
    });
    w.answer(name, Sync, |req| {
        Ok(examples::secretpropagation_v1_sync(req))
    });
    w.namespace("omega", json!({}));
    w.namespace("alpha", json!({"propagate": "true"}));
    w.namespace("beta", json!({"propagate": "true"}));
    w.namespace("gamma", json!({}));
    w.put(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "shareable", "namespace": "omega"},
               "data": {"some": "dmFsdWUK", "other": "dmFsdWUK"}}),
    );
    w.controller(composite(
        name,
        "secretpropagations",
        &[("v1", "secrets")],
        true,
        false,
    ));
    w.put(
        "secretpropagations",
        json!({"apiVersion": "example.com/v1", "kind": "SecretPropagation",
               "metadata": {"name": "secret-propagation"},
               "spec": {"sourceName": "shareable", "sourceNamespace": "omega",
                        "targetNamespaceLabelSelector": {"matchLabels": {"propagate": "true"}}}}),
    );
    let secret = |ns: &str| w.get("secrets", ns, "shareable");
    w.until("the secret in alpha and beta, status working: fine", || {
        ["alpha", "beta"]
            .iter()
            .all(|ns| secret(ns).is_some_and(|s| s["data"]["some"] == "dmFsdWUK"))
            && w.get("secretpropagations", "", "secret-propagation")
                .is_some_and(|p| p["status"]["working"] == "fine")
    })
    .await;
    assert!(secret("gamma").is_none());
    w.delete("secretpropagations", "", "secret-propagation");
    w.until("the copies gone with the parent", || {
        ["alpha", "beta"].iter().all(|ns| secret(ns).is_none())
    })
    .await;
    assert!(secret("omega").is_some());
}

/// configmap-list-v2: a namespaced parent lists ConfigMaps of another namespace (or of all
/// namespaces) by label; v2 keys them `namespace/name`, its own children too.
#[tokio::test]
async fn configmap_list_v2_sees_configmaps_of_other_namespaces() {
    let w = World::start(&[Crd("ConfigMapList", "configmaplists", true)]).await;
    let name = "configmap-list-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::configmap_list_customize(req))
    });
    w.answer(name, Sync, |req| Ok(examples::configmap_list_sync(req)));
    for ns in ["source-ns", "other-source-ns", "target-ns"] {
        w.namespace(ns, json!({}));
    }
    let mine = json!({"app": "my-app"});
    w.configmap("source-ns", "cm-1", mine.clone(), json!({"key": "value1"}));
    w.configmap("source-ns", "cm-2", mine.clone(), json!({"key": "value2"}));
    w.configmap(
        "source-ns",
        "other-cm",
        json!({"app": "other-app"}),
        json!({"key": "value3"}),
    );
    w.configmap("other-source-ns", "cm-3", mine, json!({"key": "value4"}));
    w.controller(composite(
        name,
        "configmaplists",
        &[("v1", "configmaps")],
        true,
        true,
    ));
    for (parent, spec) in [
        (
            "my-config-list",
            json!({"sourceNamespace": "source-ns", "sourceLabels": {"app": "my-app"}}),
        ),
        (
            "all-configs-list",
            json!({"sourceLabels": {"app": "my-app"}}),
        ),
    ] {
        w.put(
            "configmaplists",
            json!({"apiVersion": "example.com/v1", "kind": "ConfigMapList",
                   "metadata": {"name": parent, "namespace": "target-ns"}, "spec": spec}),
        );
    }
    let list = |name: &str| {
        w.get("configmaps", "target-ns", name)
            .map(|c| str_of(&c["data"]["configmaps"]).to_string())
    };
    w.until("the list of source-ns and that of every namespace", || {
        list("my-config-list-list").as_deref() == Some("source-ns/cm-1\nsource-ns/cm-2")
            && list("all-configs-list-list").as_deref()
                == Some("other-source-ns/cm-3\nsource-ns/cm-1\nsource-ns/cm-2")
    })
    .await;
    w.until("status.count = 2", || {
        w.get("configmaplists", "target-ns", "my-config-list")
            .is_some_and(|p| p["status"]["count"] == 2)
    })
    .await;
    w.until("a sync that saw its child, keyed namespace/name", || {
        w.requests(name, Sync)
            .iter()
            .any(|r| keys(&r["children"]["ConfigMap.v1"]) == ["target-ns/my-config-list-list"])
    })
    .await;
    // A new matching ConfigMap joins the list.
    w.configmap("source-ns", "cm-0", json!({"app": "my-app"}), json!({}));
    w.until("the list updated", || {
        list("my-config-list-list").as_deref()
            == Some("source-ns/cm-0\nsource-ns/cm-1\nsource-ns/cm-2")
    })
    .await;
}

/// namespace-list-v2: a namespaced parent lists cluster-scoped Namespaces by label; one
/// labelled later joins the list.
#[tokio::test]
async fn namespace_list_v2_sees_cluster_scoped_namespaces() {
    let w = World::start(&[Crd("NamespaceList", "namespacelists", true)]).await;
    let name = "namespace-list-controller";
    w.answer(name, Customize, |req| {
        Ok(examples::namespace_list_customize(req))
    });
    w.answer(name, Sync, |req| Ok(examples::namespace_list_sync(req)));
    w.namespace("test-ns", json!({"example-controller": "namespace-list"}));
    w.namespace("unlisted", json!({}));
    w.controller(composite(
        name,
        "namespacelists",
        &[("v1", "configmaps")],
        true,
        true,
    ));
    w.put(
        "namespacelists",
        json!({"apiVersion": "example.com/v1", "kind": "NamespaceList",
               "metadata": {"name": "filtered-namespaces", "namespace": "test-ns"},
               "spec": {"labelSelector": {"matchLabels": {"example-controller": "namespace-list"}}}}),
    );
    let list = || {
        w.get("configmaps", "test-ns", "filtered-namespaces-list")
            .map(|c| str_of(&c["data"]["namespaces"]).to_string())
    };
    w.until("the namespace list and status.count = 1", || {
        list().as_deref() == Some("test-ns")
            && w.get("namespacelists", "test-ns", "filtered-namespaces")
                .is_some_and(|p| p["status"]["count"] == 1)
    })
    .await;
    w.edit("namespaces", "", "unlisted", |n| {
        n["metadata"]["labels"] = json!({"example-controller": "namespace-list"})
    });
    w.until("the list updated", || {
        list().as_deref() == Some("test-ns\nunlisted")
    })
    .await;
}

/// clusteredparent: a DecoratorController on cluster-scoped ClusterRoles (chosen by an
/// annotation) keeps a namespaced RoleBinding for each: recreated when deleted, gone with
/// its ClusterRole. v1 keys of a cluster-scoped parent: the attachment as `ns/name`.
#[tokio::test]
async fn clusteredparent_keeps_a_rolebinding_per_annotated_clusterrole() {
    let w = World::start(&[]).await;
    w.answer("cluster-parent", Sync, |req| {
        Ok(examples::clusteredparent_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "cluster-parent"},
        "spec": {
            "resources": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles",
                           "annotationSelector": {"matchExpressions": [
                               {"key": "default-service-account-binding", "operator": "Exists"}]}}],
            "attachments": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "rolebindings"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/cluster-parent"}}}
        }
    }));
    for (name, annotations) in [
        (
            "my-clusterrole",
            json!({"default-service-account-binding": "default"}),
        ),
        ("plain-clusterrole", json!({})),
    ] {
        w.put(
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name, "annotations": annotations},
                   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch", "list"]}]}),
        );
    }
    let binding = || w.get("rolebindings", "default", "my-clusterrole");
    w.until("the RoleBinding", || binding().is_some()).await;
    let rb = binding().expect("binding");
    let role = w.get("clusterroles", "", "my-clusterrole").expect("role");
    assert!(owned_by(&rb, &role), "{rb}");
    assert_eq!(
        rb["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"],
        "cluster-parent"
    );
    w.until("a sync that saw the attachment", || {
        w.requests("cluster-parent", Sync).iter().any(|r| {
            r["object"]["metadata"]["name"] == "my-clusterrole"
                && keys(&r["attachments"]["RoleBinding.rbac.authorization.k8s.io/v1"])
                    == ["default/my-clusterrole"]
        })
    })
    .await;
    assert!(
        w.requests("cluster-parent", Sync)
            .iter()
            .all(|r| r["object"]["metadata"]["name"] == "my-clusterrole")
    );

    w.delete("rolebindings", "default", "my-clusterrole");
    w.until("the RoleBinding recreated", || {
        w.created("rolebindings", "default", "my-clusterrole") == 2 && binding().is_some()
    })
    .await;
    w.delete("clusterroles", "", "my-clusterrole");
    w.until("the RoleBinding gone with its ClusterRole", || {
        binding().is_none()
    })
    .await;
}

/// A CompositeController with a cluster-scoped parent and cluster-scoped children
/// (ClusterRoles): created, kept in place, deleted when no longer desired, gone with the
/// parent.
#[tokio::test]
async fn cluster_scoped_parent_owns_cluster_scoped_children() {
    let w = World::start(&[Crd("RoleSet", "rolesets", false)]).await;
    w.answer("rolesets", Sync, |req| Ok(examples::rolesets_sync(req)));
    w.controller(composite(
        "rolesets",
        "rolesets",
        &[("rbac.authorization.k8s.io/v1", "clusterroles")],
        false,
        false,
    ));
    w.put(
        "rolesets",
        json!({"apiVersion": "example.com/v1", "kind": "RoleSet", "metadata": {"name": "readers"},
               "spec": {"readers": ["pods", "secrets"]}}),
    );
    let role = |name: &str| w.get("clusterroles", "", name);
    w.until("both ClusterRoles and the status", || {
        role("readers-pods").is_some()
            && role("readers-secrets").is_some()
            && w.get("rolesets", "", "readers")
                .is_some_and(|p| p["status"]["roles"] == json!(["readers-pods", "readers-secrets"]))
    })
    .await;
    let parent = w.get("rolesets", "", "readers").expect("parent");
    assert!(owned_by(&role("readers-pods").expect("role"), &parent));
    w.edit("rolesets", "", "readers", |p| {
        p["spec"]["readers"] = json!(["pods"])
    });
    w.until("the ClusterRole no longer desired deleted", || {
        role("readers-secrets").is_none()
    })
    .await;
    assert!(role("readers-pods").is_some());
    w.delete("rolesets", "", "readers");
    w.until("the ClusterRoles gone with the parent", || {
        role("readers-pods").is_none()
    })
    .await;
}

/// crd-roles: a DecoratorController on CustomResourceDefinitions (chosen by annotation)
/// attaches a reader ClusterRole to each, gone with its CRD.
#[tokio::test]
async fn crd_roles_attach_a_clusterrole_to_annotated_crds() {
    let w = World::start(&[]).await;
    w.answer("crd-role-controller", Sync, |req| {
        Ok(examples::crd_roles_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "crd-role-controller"},
        "spec": {
            "resources": [{"apiVersion": "apiextensions.k8s.io/v1", "resource": "customresourcedefinitions",
                           "annotationSelector": {"matchExpressions": [{"key": "enable-default-roles", "operator": "Exists"}]}}],
            "attachments": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/sync-crd-role", "timeout": "10s"}}}
        }
    }));
    let crd = |kind: &str, plural: &str, annotations: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{plural}.example.com"), "annotations": annotations},
               "spec": {"group": "example.com", "scope": "Cluster",
                        "names": {"kind": kind, "plural": plural},
                        "versions": [{"name": "v1", "served": true, "storage": true}]}})
    };
    w.put(
        "customresourcedefinitions",
        crd("MyTest", "my-tests", json!({"enable-default-roles": "yes"})),
    );
    w.put(
        "customresourcedefinitions",
        crd("Other", "others", json!({})),
    );
    let role = || w.get("clusterroles", "", "my-tests.example.com-reader");
    w.until("the reader ClusterRole", || role().is_some()).await;
    let cr = role().expect("role");
    let annotated = w
        .get("customresourcedefinitions", "", "my-tests.example.com")
        .expect("crd");
    assert!(owned_by(&cr, &annotated), "{cr}");
    assert_eq!(cr["rules"][0]["resources"], json!(["my-tests"]));
    assert!(
        w.get("clusterroles", "", "others.example.com-reader")
            .is_none()
    );
    assert!(
        w.requests("crd-role-controller", Sync)
            .iter()
            .all(|r| r["object"]["metadata"]["name"] == "my-tests.example.com")
    );
    w.delete("customresourcedefinitions", "", "my-tests.example.com");
    w.until("the ClusterRole gone with its CRD", || role().is_none())
        .await;
}

/// A DecoratorController on Namespaces (cluster-scoped) puts a ConfigMap into each
/// selected namespace as an attachment; one selected later gets one too; one deleted by
/// someone else is put back.
#[tokio::test]
async fn decorator_on_namespaces_puts_a_configmap_in_each() {
    let w = World::start(&[]).await;
    w.answer("global-settings", Sync, |req| {
        Ok(examples::global_settings_sync(req))
    });
    w.namespace("team-a", json!({"settings": "global"}));
    w.namespace("team-b", json!({}));
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "global-settings"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "namespaces",
                           "labelSelector": {"matchLabels": {"settings": "global"}}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/global-settings"}}}
        }
    }));
    let settings = |ns: &str| w.get("configmaps", ns, "global-settings");
    w.until("the ConfigMap in team-a", || {
        settings("team-a").is_some_and(|c| c["data"]["namespace"] == "team-a")
    })
    .await;
    assert!(settings("team-b").is_none());
    w.edit("namespaces", "", "team-b", |n| {
        n["metadata"]["labels"] = json!({"settings": "global"})
    });
    w.until("the ConfigMap in team-b once selected", || {
        settings("team-b").is_some()
    })
    .await;
    w.delete("configmaps", "team-a", "global-settings");
    w.until("the ConfigMap recreated", || {
        w.created("configmaps", "team-a", "global-settings") == 2 && settings("team-a").is_some()
    })
    .await;
}

/// indexedjob: Pods with stable indexes, `parallelism` at a time, until `completions`
/// succeeded. The test plays the kubelet: it marks each running Pod Succeeded.
#[tokio::test]
async fn indexedjob_runs_pods_by_index_until_all_succeeded() {
    let w = World::start(&[Crd("IndexedJob", "indexedjobs", true)]).await;
    w.answer("indexedjob-controller", Sync, |req| {
        Ok(examples::indexedjob_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "indexedjob-controller"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "indexedjobs"},
            "childResources": [{"apiVersion": "v1", "resource": "pods"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/indexedjob"}}}
        }
    }));
    w.put(
        "indexedjobs",
        json!({"apiVersion": "example.com/v1", "kind": "IndexedJob",
               "metadata": {"name": "print-index"},
               "spec": {"completions": 4, "parallelism": 2,
                        "template": {"metadata": {"labels": {"app": "print-index"}},
                                     "spec": {"restartPolicy": "OnFailure",
                                              "containers": [{"name": "print-index", "image": "busybox",
                                                              "command": ["sh", "-c", "echo ${JOB_INDEX}"]}]}}}}),
    );
    let mut most_running = 0;
    w.until("4 successful completions", || {
        // Play the kubelet: every running Pod of the job succeeds.
        let running: Vec<Value> = w
            .list("pods")
            .into_iter()
            .filter(|p| p["status"]["phase"] != "Succeeded")
            .collect();
        most_running = most_running.max(running.len());
        for mut pod in running {
            pod["status"] = json!({"phase": "Succeeded"});
            w.put("pods", pod);
        }
        w.get("indexedjobs", "default", "print-index")
            .is_some_and(|j| j["status"]["succeeded"] == 4)
    })
    .await;
    assert!(most_running <= 2, "parallelism exceeded: {most_running}");
    let job = w.get("indexedjobs", "default", "print-index").expect("job");
    assert_eq!(job["status"]["conditions"][0]["status"], "True", "{job}");
    let pod = w.get("pods", "default", "print-index-3").expect("pod 3");
    assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "3");
    assert_eq!(pod["metadata"]["labels"]["app"], "print-index");
    assert_eq!(
        pod["metadata"]["labels"]["controller-uid"],
        job["metadata"]["uid"]
    );
    assert!(w.get("pods", "default", "print-index-4").is_none());
}

/// daemonjob: a DaemonSet runs until every node reports ready, then the job completes and
/// the DaemonSet is removed. The test plays the DaemonSet controller (no nodes here).
#[tokio::test]
async fn daemonjob_completes_when_its_daemonset_is_ready_and_cleans_up() {
    let w = World::start(&[Crd("DaemonJob", "daemonjobs", true)]).await;
    w.answer("daemonjob-controller", Sync, |req| {
        Ok(examples::daemonjob_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "daemonjob-controller"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "daemonjobs"},
            "childResources": [{"apiVersion": "apps/v1", "resource": "daemonsets"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/daemonjob"}}}
        }
    }));
    w.put(
        "daemonjobs",
        json!({"apiVersion": "example.com/v1", "kind": "DaemonJob", "metadata": {"name": "hello-world"},
               "spec": {"template": {"metadata": {"labels": {"app": "hello-world"}},
                                     "spec": {"terminationGracePeriodSeconds": 10,
                                              "containers": [{"name": "hello-world", "image": "busybox",
                                                              "command": ["sh", "-c", "echo 'Hello world' && sleep 30"]}]}}}}),
    );
    let ds = || w.get("daemonsets", "default", "hello-world-dj");
    let job = || w.get("daemonjobs", "default", "hello-world");
    w.until("the DaemonSet and a job not complete yet", || {
        ds().is_some() && job().is_some_and(|j| j["status"]["conditions"][0]["status"] == "False")
    })
    .await;
    assert_eq!(
        ds().expect("daemonset")["spec"]["template"]["spec"]["initContainers"][0]["name"],
        "hello-world"
    );
    // Play the DaemonSet controller: the pod on the only node is ready.
    w.edit("daemonsets", "default", "hello-world-dj", |d| {
        d["status"] = json!({"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                             "numberReady": 1, "numberMisscheduled": 0});
    });
    w.until("the job complete and the DaemonSet cleaned up", || {
        job().is_some_and(|j| j["status"]["conditions"][0]["status"] == "True") && ds().is_none()
    })
    .await;
    assert_eq!(job().expect("job")["status"]["numberReady"], 1);
}

/// examples/bluegreen: a BlueGreenDeployment keeps a Service on its active ReplicaSet; a
/// new pod template rolls out to the other color, and the Service swaps once all of it is
/// available; a second rollout swaps back. The test plays the ReplicaSet controller: each
/// ReplicaSet's status follows its spec.
#[tokio::test]
async fn bluegreen_rolls_out_to_the_other_color_and_swaps_the_service() {
    let w = World::start(&[Crd("BlueGreenDeployment", "bluegreendeployments", true)]).await;
    w.answer("bluegreen-controller", Sync, |req| {
        Ok(examples::bluegreen_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "bluegreen-controller"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "bluegreendeployments"},
            "childResources": [
                {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}},
                {"apiVersion": "apps/v1", "resource": "replicasets", "updateStrategy": {"method": "InPlace"}}
            ],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/bluegreen"}}}
        }
    }));
    let labels = json!({"app": "nginx", "component": "frontend"});
    w.put(
        "bluegreendeployments",
        json!({"apiVersion": "example.com/v1", "kind": "BlueGreenDeployment",
               "metadata": {"name": "nginx", "labels": labels},
               "spec": {"replicas": 3, "minReadySeconds": 5,
                        "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                                              "ports": [{"containerPort": 80}]}]}},
                        "service": {"metadata": {"name": "nginx-frontend", "labels": labels},
                                    "spec": {"selector": labels, "ports": [{"port": 80}]}}}}),
    );
    let rs = |color: &str| w.get("replicasets", "default", &format!("nginx-{color}"));
    // The ReplicaSet controller: each ReplicaSet's Pods all come up and become available.
    let replicaset_controller = || {
        for color in ["blue", "green"] {
            let Some(mut r) = rs(color) else { continue };
            let n = r["spec"]["replicas"].clone();
            if r["status"]["replicas"] != n || r["status"]["availableReplicas"] != n {
                r["status"] = json!({"replicas": n, "readyReplicas": n, "availableReplicas": n,
                                     "observedGeneration": r["metadata"]["generation"]});
                w.put("replicasets", r);
            }
        }
    };
    let settled_on = |color: &str| {
        let other = if color == "blue" { "green" } else { "blue" };
        w.get("bluegreendeployments", "default", "nginx")
            .is_some_and(|b| {
                b["status"]["activeColor"] == color
                    && b["status"]["active"]["availableReplicas"] == 3
                    && b["status"]["observedGeneration"] == b["metadata"]["generation"]
            })
            && rs(color)
                .is_some_and(|r| r["spec"]["replicas"] == 3 && r["status"]["readyReplicas"] == 3)
            && rs(other).is_some_and(|r| r["spec"]["replicas"] == 0 && r["status"]["replicas"] == 0)
            && w.get("services", "default", "nginx-frontend")
                .is_some_and(|s| s["spec"]["selector"]["color"] == color)
    };
    w.until("blue active, green scaled to zero", || {
        replicaset_controller();
        settled_on("blue")
    })
    .await;
    w.edit("bluegreendeployments", "default", "nginx", |b| {
        b["spec"]["template"]["metadata"]["labels"]["new"] = json!("label")
    });
    w.until("the rollout to green, the Service swapped", || {
        replicaset_controller();
        settled_on("green")
    })
    .await;
    assert_eq!(
        rs("green").expect("green")["spec"]["template"]["metadata"]["labels"]["new"],
        "label"
    );
    w.edit("bluegreendeployments", "default", "nginx", |b| {
        b["spec"]["template"]["metadata"]["labels"]["new2"] = json!("label2")
    });
    w.until("the next rollout back to blue", || {
        replicaset_controller();
        settled_on("blue")
    })
    .await;
    assert_eq!(
        rs("blue").expect("blue")["spec"]["template"]["metadata"]["labels"]["new2"],
        "label2"
    );
}

/// examples/service-per-pod: a DecoratorController gives each Pod of an annotated
/// StatefulSet a Service of its own (attachments), following its replicas, and takes them
/// away through its finalize hook once the StatefulSet stops matching; a second decorator
/// labels annotated Pods with their own name and, the label set, no longer matches them.
#[tokio::test]
async fn service_per_pod_decorates_statefulsets_and_pods() {
    let w = World::start(&[]).await;
    w.answer("service-per-pod", Sync, |req| {
        Ok(examples::service_per_pod_sync(req))
    });
    w.answer("service-per-pod", Finalize, |req| {
        Ok(examples::service_per_pod_finalize(req))
    });
    w.answer("pod-name-label", Sync, |req| {
        Ok(examples::pod_name_label_sync(req))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "service-per-pod"},
        "spec": {
            "resources": [{"apiVersion": "apps/v1", "resource": "statefulsets",
                           "annotationSelector": {"matchExpressions": [
                               {"key": "service-per-pod-label", "operator": "Exists"},
                               {"key": "service-per-pod-ports", "operator": "Exists"}]}}],
            "attachments": [{"apiVersion": "v1", "resource": "services"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/sync-service-per-pod"}},
                      "finalize": {"webhook": {"url": "http://hooks.test/finalize-service-per-pod"}}}
        }
    }));
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "pod-name-label"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "pods",
                           "labelSelector": {"matchExpressions": [{"key": "pod-name", "operator": "DoesNotExist"}]},
                           "annotationSelector": {"matchExpressions": [{"key": "pod-name-label", "operator": "Exists"}]}}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/sync-pod-name-label"}}}
        }
    }));
    let labels = json!({"app": "nginx"});
    w.put(
        "statefulsets",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "nginx", "annotations": {"service-per-pod-label": "pod-name",
                                                             "service-per-pod-ports": "80:80"}},
               "spec": {"selector": {"matchLabels": labels}, "serviceName": "nginx", "replicas": 3,
                        "template": {"metadata": {"labels": labels, "annotations": {"pod-name-label": "pod-name"}},
                                     "spec": {"terminationGracePeriodSeconds": 1,
                                              "containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8",
                                                              "ports": [{"containerPort": 80, "name": "web"}]}]}}}}),
    );
    let service = |n: i64| w.get("services", "default", &format!("nginx-{n}"));
    w.until("a Service per Pod, nginx-0 to nginx-2", || {
        (0..3).all(|n| service(n).is_some())
    })
    .await;
    let first = service(0).expect("nginx-0");
    assert_eq!(first["spec"]["selector"], json!({"pod-name": "nginx-0"}));
    assert_eq!(first["spec"]["ports"][0]["port"], 80);
    assert_eq!(first["spec"]["ports"][0]["targetPort"], 80);
    // A Pod as the StatefulSet controller makes it: the second decorator labels it with
    // its name, and then leaves it alone.
    w.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web-by-hand-0", "labels": labels, "annotations": {"pod-name-label": "pod-name"}},
               "spec": {"containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8"}]}}),
    );
    w.until("the Pod labelled with its name", || {
        w.get("pods", "default", "web-by-hand-0")
            .is_some_and(|p| p["metadata"]["labels"]["pod-name"] == "web-by-hand-0")
    })
    .await;
    w.edit("statefulsets", "default", "nginx", |s| {
        s["spec"]["replicas"] = json!(2)
    });
    w.until("the third Service gone with the third replica", || {
        service(2).is_none() && service(1).is_some()
    })
    .await;
    // The StatefulSet no longer matches: the finalize hook takes its Services away and
    // the controller lets the StatefulSet go.
    w.edit("statefulsets", "default", "nginx", |s| {
        s["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("service-per-pod-label");
    });
    w.until("the Services gone, the finalizer removed", || {
        (0..3).all(|n| service(n).is_none())
            && w.get("statefulsets", "default", "nginx").is_some_and(|s| {
                s["metadata"]["finalizers"]
                    .as_array()
                    .is_none_or(|f| f.is_empty())
            })
    })
    .await;
    assert!(!w.requests("service-per-pod", Finalize).is_empty());
}
