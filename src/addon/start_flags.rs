//! addon-operator's `start` flags. Each is the environment variable its help names
//! ("Can be set with $MODULES_DIR"), given on the command line: the flag wins over the
//! variable, and bosun reads it where it reads the variable.
//!
//! ```text
//! --modules-dir=/m  ─┐
//!                    ├─> Given {MODULES_DIR: /m} ─> OperatorConfig::from_env_and ─> config
//! MODULES_DIR=/x  ───┘        (flag first)            logging::Overrides
//! ```
//! The few flags whose feature bosun does not have are refused by name when they ask
//! for it, rather than ignored.

/// addon-operator's `start` flags (`addon-operator start --help`).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "addon-operator's flags (each as its variable)")]
pub struct StartFlags {
    /// `MODULES_DIR`.
    #[arg(long, value_name = "DIRS")]
    pub modules_dir: Option<String>,
    /// `UNNUMBERED_MODULES_ORDER`.
    #[arg(long, value_name = "N")]
    pub unnumbered_modules_order: Option<String>,
    /// `GLOBAL_HOOKS_DIR`.
    #[arg(long, value_name = "DIR")]
    pub global_hooks_dir: Option<String>,
    /// `ADDON_OPERATOR_TMP_DIR`.
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<String>,
    /// `ADDON_OPERATOR_NAMESPACE`.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// `ADDON_OPERATOR_LISTEN_ADDRESS`.
    #[arg(long, value_name = "ADDR")]
    pub prometheus_listen_address: Option<String>,
    /// `ADDON_OPERATOR_LISTEN_PORT`.
    #[arg(long, value_name = "PORT")]
    pub prometheus_listen_port: Option<String>,
    /// `ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX`.
    #[arg(long, value_name = "PREFIX")]
    pub prometheus_metrics_prefix: Option<String>,
    /// `ADDON_OPERATOR_CONFIG_MAP`.
    #[arg(long, value_name = "NAME")]
    pub config_map: Option<String>,
    /// `ADDON_OPERATOR_CRD_EXTRA_LABELS`.
    #[arg(long, value_name = "LABELS")]
    pub crd_extra_labels: Option<String>,
    /// `ADDON_OPERATOR_CRD_FILTER_PREFIXES`.
    #[arg(long, value_name = "PREFIXES")]
    pub crd_filters: Option<String>,
    /// `ADDON_OPERATOR_SHELL_CHROOT_DIR`: refused (bosun does not chroot hooks).
    #[arg(long, value_name = "DIR")]
    pub shell_chroot_dir: Option<String>,
    /// `STRICT_CHECK_VALUES_MODE_ENABLED`: `true` is refused.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub strict_check_values_mode_enabled: Option<String>,
    /// `ADDON_OPERATOR_APPLIED_MODULE_EXTENDERS`: refused (bosun has no module extenders).
    #[arg(long, value_name = "EXTENDERS")]
    pub applied_module_extenders: Option<String>,
    /// `HELM_HISTORY_MAX`.
    #[arg(long, value_name = "N")]
    pub helm_history_max: Option<String>,
    /// `HELM_TIMEOUT`.
    #[arg(long, value_name = "DURATION")]
    pub helm_timeout: Option<String>,
    /// `HELM_IGNORE_RELEASE`.
    #[arg(long, value_name = "RELEASES")]
    pub helm_ignore_release: Option<String>,
    /// `HELM_MONITOR_KUBE_CLIENT_QPS`.
    #[arg(long, value_name = "QPS")]
    pub helm_monitor_kube_client_qps: Option<String>,
    /// `HELM_MONITOR_KUBE_CLIENT_BURST`.
    #[arg(long, value_name = "N")]
    pub helm_monitor_kube_client_burst: Option<String>,
    /// `ADDON_OPERATOR_ADMISSION_SERVER_ENABLED`: `true` is refused (no admission server).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub admission_server_enabled: Option<String>,
    /// `ADDON_OPERATOR_ADMISSION_SERVER_LISTEN_PORT` (unused: no admission server).
    #[arg(long, value_name = "PORT")]
    pub admission_server_listen_port: Option<String>,
    /// `ADDON_OPERATOR_ADMISSION_SERVER_CERTS_DIR` (unused: no admission server).
    #[arg(long, value_name = "DIR")]
    pub admission_server_certs_dir: Option<String>,
    /// `KUBE_CONTEXT`.
    #[arg(long, value_name = "CONTEXT")]
    pub kube_context: Option<String>,
    /// `KUBE_CONFIG`.
    #[arg(long, value_name = "FILE")]
    pub kube_config: Option<String>,
    /// `KUBE_SERVER`: refused (use a kubeconfig).
    #[arg(long, value_name = "URL")]
    pub kube_server: Option<String>,
    /// `KUBE_CLIENT_QPS`.
    #[arg(long, value_name = "QPS")]
    pub kube_client_qps: Option<String>,
    /// `KUBE_CLIENT_BURST`.
    #[arg(long, value_name = "N")]
    pub kube_client_burst: Option<String>,
    /// `OBJECT_PATCHER_KUBE_CLIENT_QPS`.
    #[arg(long, value_name = "QPS")]
    pub object_patcher_kube_client_qps: Option<String>,
    /// `OBJECT_PATCHER_KUBE_CLIENT_BURST`.
    #[arg(long, value_name = "N")]
    pub object_patcher_kube_client_burst: Option<String>,
    /// `OBJECT_PATCHER_KUBE_CLIENT_TIMEOUT` (a Go duration; the patcher's requests end
    /// with the client's own timeouts).
    #[arg(long, value_name = "DURATION")]
    pub object_patcher_kube_client_timeout: Option<String>,
    /// `LOG_LEVEL`.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// `LOG_TYPE`.
    #[arg(long, value_name = "TYPE")]
    pub log_type: Option<String>,
    /// `LOG_NO_TIME`.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub log_no_time: Option<String>,
    /// `LOG_PROXY_HOOK_JSON`.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub log_proxy_hook_json: Option<String>,
    /// `DEBUG_UNIX_SOCKET`.
    #[arg(long, value_name = "PATH")]
    pub debug_unix_socket: Option<String>,
    /// `DEBUG_HTTP_SERVER_ADDR`.
    #[arg(long, value_name = "ADDR")]
    pub debug_http_addr: Option<String>,
    /// `DEBUG_KEEP_TMP_FILES`.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub debug_keep_tmp_files: Option<String>,
    /// `DEBUG_KUBERNETES_API` (client-go's debug messages; bosun's client logs warnings).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub debug_kubernetes_api: Option<String>,
}

/// An addon-operator flag bosun cannot honour.
#[derive(Debug, thiserror::Error)]
#[error("--{flag}={value:?}: {why}")]
pub struct RefusedFlag {
    /// The flag's name.
    pub flag: &'static str,
    /// Its value.
    pub value: String,
    /// What bosun lacks, and what to do instead.
    pub why: &'static str,
}

pub use crate::host::process::Given;
use crate::host::process::go_bool_true;

impl StartFlags {
    /// The flags given, as their variables; a flag asking for what bosun lacks is refused.
    pub fn given(&self) -> Result<Given, RefusedFlag> {
        let refuse = |flag, value: &Option<String>, wanted: fn(&str) -> bool, why| match value {
            Some(v) if wanted(v) => Err(RefusedFlag {
                flag,
                value: v.clone(),
                why,
            }),
            _ => Ok(()),
        };
        refuse(
            "shell-chroot-dir",
            &self.shell_chroot_dir,
            |v| !v.is_empty(),
            "bosun runs hooks without a chroot; build the image with the hooks' tools instead",
        )?;
        refuse(
            "strict-check-values-mode-enabled",
            &self.strict_check_values_mode_enabled,
            go_bool_true,
            "bosun reads a module without values.yaml as one with empty values",
        )?;
        refuse(
            "applied-module-extenders",
            &self.applied_module_extenders,
            |v| !v.is_empty(),
            "bosun has no module extenders: a module is enabled by values, the ConfigMap and its enabled script",
        )?;
        refuse(
            "admission-server-enabled",
            &self.admission_server_enabled,
            go_bool_true,
            "bosun has no admission server (hooks' validating webhooks are not served)",
        )?;
        refuse(
            "kube-server",
            &self.kube_server,
            |v| !v.is_empty(),
            "bosun takes the API server from the kubeconfig (--kube-config) or the pod's service account",
        )?;
        let pairs: [(&'static str, &Option<String>); 25] = [
            ("MODULES_DIR", &self.modules_dir),
            ("UNNUMBERED_MODULES_ORDER", &self.unnumbered_modules_order),
            ("GLOBAL_HOOKS_DIR", &self.global_hooks_dir),
            ("ADDON_OPERATOR_TMP_DIR", &self.tmp_dir),
            ("ADDON_OPERATOR_NAMESPACE", &self.namespace),
            (
                "ADDON_OPERATOR_LISTEN_ADDRESS",
                &self.prometheus_listen_address,
            ),
            ("ADDON_OPERATOR_LISTEN_PORT", &self.prometheus_listen_port),
            (
                "ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX",
                &self.prometheus_metrics_prefix,
            ),
            ("ADDON_OPERATOR_CONFIG_MAP", &self.config_map),
            ("ADDON_OPERATOR_CRD_EXTRA_LABELS", &self.crd_extra_labels),
            ("ADDON_OPERATOR_CRD_FILTER_PREFIXES", &self.crd_filters),
            ("HELM_HISTORY_MAX", &self.helm_history_max),
            ("HELM_TIMEOUT", &self.helm_timeout),
            ("HELM_IGNORE_RELEASE", &self.helm_ignore_release),
            (
                "HELM_MONITOR_KUBE_CLIENT_QPS",
                &self.helm_monitor_kube_client_qps,
            ),
            (
                "HELM_MONITOR_KUBE_CLIENT_BURST",
                &self.helm_monitor_kube_client_burst,
            ),
            ("KUBE_CONTEXT", &self.kube_context),
            ("KUBE_CONFIG", &self.kube_config),
            ("KUBE_CLIENT_QPS", &self.kube_client_qps),
            ("KUBE_CLIENT_BURST", &self.kube_client_burst),
            (
                "OBJECT_PATCHER_KUBE_CLIENT_QPS",
                &self.object_patcher_kube_client_qps,
            ),
            (
                "OBJECT_PATCHER_KUBE_CLIENT_BURST",
                &self.object_patcher_kube_client_burst,
            ),
            ("DEBUG_UNIX_SOCKET", &self.debug_unix_socket),
            ("DEBUG_HTTP_SERVER_ADDR", &self.debug_http_addr),
            ("DEBUG_KEEP_TMP_FILES", &self.debug_keep_tmp_files),
        ];
        Ok(Given::new(
            pairs
                .into_iter()
                .filter_map(|(name, v)| v.clone().map(|v| (name, v)))
                .collect(),
        ))
    }

    /// `--log-level`, `--log-type` and `--log-no-time` over `LOG_LEVEL`, `LOG_TYPE` and
    /// `LOG_NO_TIME` (metacontroller's `--zap-*` flags win over them).
    pub fn logging(&self, mut zap: crate::logging::Overrides) -> crate::logging::Overrides {
        if zap.level.is_none() {
            zap.level = self.log_level.clone();
        }
        if zap.json.is_none() && zap.log_type.is_none() {
            zap.log_type = self.log_type.clone();
        }
        if let Some(v) = &self.log_no_time {
            zap.no_time = Some(go_bool_true(v));
        }
        if let Some(v) = &self.log_proxy_hook_json {
            zap.proxy_hook_json = Some(go_bool_true(v));
        }
        zap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_its_variable_and_wins_over_the_environment_s_spellings() {
        let flags = StartFlags {
            modules_dir: Some("/flag".into()),
            ..Default::default()
        };
        let given = flags.given().expect("taken");
        assert_eq!(
            given.var(&["ADDON_OPERATOR_MODULES_DIR", "MODULES_DIR"]),
            Some("/flag".into())
        );
        assert_eq!(given.var(&["BOSUN_SURELY_UNSET_VARIABLE"]), None);
    }

    #[test]
    fn a_flag_asking_for_what_bosun_lacks_is_refused_by_name() {
        let flags = StartFlags {
            admission_server_enabled: Some("true".into()),
            ..Default::default()
        };
        let err = flags.given().expect_err("refused").to_string();
        assert!(
            err.starts_with("--admission-server-enabled=\"true\""),
            "{err}"
        );
        let flags = StartFlags {
            admission_server_enabled: Some("false".into()),
            shell_chroot_dir: Some(String::new()),
            ..Default::default()
        };
        assert!(flags.given().is_ok(), "off is what bosun does");
    }
}
