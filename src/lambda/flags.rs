//! metacontroller's command-line flags that are not about controllers: its logging
//! (controller-runtime's `--zap-*`), its listeners (`--metrics-address`,
//! `--health-probe-bind-address`, `--pprof-address`) and `--kubeconfig`, so that the
//! arguments of metacontroller's manifests and chart start bosun unchanged.

use std::net::SocketAddr;

/// metacontroller's flags beside the controllers' own.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetacontrollerFlags {
    /// controller-runtime's log level: `debug`, `info`, `error`, or a verbosity above 0
    /// (metacontroller: 4 object actions, 5 hook calls, 6 bodies); 1–4 are bosun's `debug`,
    /// 5 and more its `trace`. Wins over `LOG_LEVEL`.
    #[arg(long, value_name = "LEVEL")]
    pub zap_log_level: Option<String>,
    /// Development logging: `debug` level and text lines, unless set otherwise.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub zap_devel: Option<bool>,
    /// `json` or `console` lines (over `LOG_TYPE`).
    #[arg(long, value_name = "ENCODER")]
    pub zap_encoder: Option<String>,
    /// Accepted: bosun's log lines carry no stack traces.
    #[arg(long, value_name = "LEVEL")]
    pub zap_stacktrace_level: Option<String>,
    /// Accepted: bosun's timestamps are RFC 3339 (`LOG_NO_TIME` leaves them out).
    #[arg(long, value_name = "ENCODING")]
    pub zap_time_encoding: Option<String>,
    /// Serve `/metrics` on this address too (Go's `:9999` form; `0`: not). The
    /// operator's listener serves it in any case.
    #[arg(long, value_name = "ADDR")]
    pub metrics_address: Option<String>,
    /// Serve `/healthz` and `/readyz` on this address too (Go's `:8081` form; `0`: not).
    #[arg(long, value_name = "ADDR")]
    pub health_probe_bind_address: Option<String>,
    /// Serve `/debug/pprof/` (CPU and heap profiles in the format `go tool pprof` reads)
    /// on this address (Go's `:6060` form; `0`, the default as metacontroller's: not).
    #[arg(long, value_name = "ADDR")]
    pub pprof_address: Option<String>,
    /// The kubeconfig (as `KUBE_CONFIG`, which wins).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
}

/// A flag's value that is not what it should be.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("--{flag}={value:?}: {expected}")]
pub struct FlagError {
    flag: &'static str,
    value: String,
    expected: &'static str,
}

impl MetacontrollerFlags {
    /// The logging these flags ask for.
    pub fn logging(&self) -> Result<crate::logging::Overrides, FlagError> {
        let devel = self.zap_devel.unwrap_or(false);
        let level = match self.zap_log_level.as_deref() {
            None => devel.then(|| "debug".to_string()),
            Some(v) => Some(zap_level(v)?),
        };
        let json = match self.zap_encoder.as_deref() {
            None => devel.then_some(false),
            Some("json") => Some(true),
            Some("console") => Some(false),
            Some(other) => {
                return Err(FlagError {
                    flag: "zap-encoder",
                    value: other.into(),
                    expected: "expected json or console",
                });
            }
        };
        Ok(crate::logging::Overrides {
            level,
            json,
            ..Default::default()
        })
    }

    /// Where `/metrics` is served besides the operator's listener.
    pub fn metrics(&self) -> Result<Option<SocketAddr>, FlagError> {
        address("metrics-address", self.metrics_address.as_deref())
    }

    /// Where `/healthz` and `/readyz` are served besides the operator's listener.
    pub fn probes(&self) -> Result<Option<SocketAddr>, FlagError> {
        address(
            "health-probe-bind-address",
            self.health_probe_bind_address.as_deref(),
        )
    }

    /// Where `/debug/pprof/` is served.
    pub fn pprof(&self) -> Result<Option<SocketAddr>, FlagError> {
        address("pprof-address", self.pprof_address.as_deref())
    }

    /// Checks every flag (bad values stop the start).
    pub fn check(&self) -> Result<(), FlagError> {
        self.logging()?;
        self.metrics()?;
        self.probes()?;
        self.pprof()?;
        Ok(())
    }
}

/// controller-runtime's level: a name, or a verbosity above 0.
fn zap_level(value: &str) -> Result<String, FlagError> {
    let v = value.trim().to_ascii_lowercase();
    match v.as_str() {
        "debug" | "info" | "error" => return Ok(v),
        "panic" | "dpanic" | "fatal" => return Ok("error".into()),
        "warn" => return Ok(v),
        _ => {}
    }
    match v.parse::<u32>() {
        Ok(0) => Ok("info".into()),
        Ok(1..=4) => Ok("debug".into()),
        Ok(_) => Ok("trace".into()),
        Err(_) => Err(FlagError {
            flag: "zap-log-level",
            value: value.into(),
            expected: "expected debug, info, error, or a whole number above 0",
        }),
    }
}

/// Go's listen address (`:9999`, `host:port`, `[::1]:8081`); `0` or empty: none.
fn address(flag: &'static str, value: Option<&str>) -> Result<Option<SocketAddr>, FlagError> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty() && *v != "0") else {
        return Ok(None);
    };
    let full = match v.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => v.to_string(),
    };
    full.parse().map(Some).map_err(|_| FlagError {
        flag,
        value: v.into(),
        expected: "expected an address such as :9999 or 127.0.0.1:9999 (0: none)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zap_levels_and_encoders_map_to_bosun_s_logging() {
        let flags = |level: Option<&str>, devel: Option<bool>, encoder: Option<&str>| {
            MetacontrollerFlags {
                zap_log_level: level.map(String::from),
                zap_devel: devel,
                zap_encoder: encoder.map(String::from),
                ..Default::default()
            }
            .logging()
        };
        let level = |l: &str| Some(l.to_string());
        assert_eq!(
            flags(Some("4"), None, None).map(|o| o.level),
            Ok(level("debug"))
        );
        assert_eq!(
            flags(Some("6"), None, None).map(|o| o.level),
            Ok(level("trace"))
        );
        assert_eq!(
            flags(Some("error"), None, None).map(|o| o.level),
            Ok(level("error"))
        );
        assert_eq!(
            flags(None, Some(true), None),
            Ok(crate::logging::Overrides {
                level: level("debug"),
                json: Some(false),
                ..Default::default()
            })
        );
        assert_eq!(
            flags(None, None, Some("json")).map(|o| o.json),
            Ok(Some(true))
        );
        assert_eq!(flags(None, None, None), Ok(Default::default()));
        let bad = flags(Some("loud"), None, None).unwrap_err().to_string();
        assert!(
            bad.starts_with("--zap-log-level=\"loud\": expected"),
            "{bad}"
        );
        assert!(flags(None, None, Some("xml")).is_err());
    }

    #[test]
    fn go_listen_addresses_are_read() {
        let f = |v: &str| address("metrics-address", Some(v));
        assert_eq!(f(":9999"), Ok(Some("0.0.0.0:9999".parse().expect("addr"))));
        assert_eq!(
            f("127.0.0.1:8081"),
            Ok(Some("127.0.0.1:8081".parse().expect("addr")))
        );
        assert_eq!(f("0"), Ok(None));
        assert_eq!(address("metrics-address", None), Ok(None));
        let bad = f("nine").unwrap_err().to_string();
        assert!(bad.contains("--metrics-address=\"nine\""), "{bad}");
    }
}
