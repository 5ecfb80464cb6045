//! The examples `bosun run --sandbox` applies beside the sample modules, so that all three
//! subsystems show at once: `examples/lambda/` (a CompositeController and a
//! DecoratorController on a CRD of their own, their webhooks in `hooks.py`, a parent
//! object) and `examples/deployer/` (a Target that is the sandbox, a kubernetes-manifest
//! and a helm DeployItem).
//!
//! The files are plain manifests with three placeholders, filled here: `${HOOKS_URL}`
//! (where `hooks.py` listens; started here, stopped with bosun), `${SANDBOX_KUBECONFIG}`
//! (the kubeconfig written for the sandbox) and `${CHART_ARCHIVE:dir}` (the chart folder
//! `dir`, beside the file, as a base64 gzipped tar). Objects that exist are left alone, so
//! a restart on the same data folder changes nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use bosun_kube::KindResolver;
use bosun_kube::raw::RawApi;

/// What runs for the examples (the webhook process; killed when dropped).
pub struct Examples {
    _hooks: Option<tokio::process::Child>,
}

/// Which examples to apply.
pub struct Applied<'a> {
    /// The examples folder (`examples`).
    pub root: &'a Path,
    /// The sandbox's kubeconfig file.
    pub kubeconfig: &'a Path,
    /// The lambda examples (their webhooks are started).
    pub lambda: bool,
    /// The deployer examples.
    pub deployer: bool,
}

/// How long a kind defined by an example's CRD may take to be served.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Starts the examples' webhooks and applies the examples of the subsystems switched on.
pub async fn apply(client: kube::Client, what: &Applied<'_>) -> anyhow::Result<Examples> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut hooks = None;
    let mut hooks_url = String::new();
    if what.lambda {
        let (child, url) = start_hooks(&what.root.join("lambda/hooks.py")).await?;
        hooks = Some(child);
        hooks_url = url;
        files.extend(yaml_files(&what.root.join("lambda"))?);
    }
    if what.deployer {
        files.extend(yaml_files(&what.root.join("deployer"))?);
    }
    let kubeconfig = std::fs::read_to_string(what.kubeconfig)
        .with_context(|| format!("reading {}", what.kubeconfig.display()))?;
    let resolver = KindResolver::new(client.clone());
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{}: not YAML", file.display()))?;
        let dir = file.parent().unwrap_or(what.root);
        for mut doc in docs.into_iter().filter(Value::is_object) {
            fill(&mut doc, &hooks_url, &kubeconfig, dir)
                .with_context(|| format!("{}", file.display()))?;
            create(&client, &resolver, &doc)
                .await
                .with_context(|| format!("{}: {}", file.display(), describe(&doc)))?;
        }
    }
    Ok(Examples { _hooks: hooks })
}

/// The `.yaml` files of `dir`, in name order.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Starts `hooks.py`; its first line is the port it listens on.
async fn start_hooks(script: &Path) -> anyhow::Result<(tokio::process::Child, String)> {
    use tokio::io::AsyncBufReadExt as _;
    let mut command = tokio::process::Command::new("python3");
    command
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    // Gone with bosun, also when bosun is killed.
    crate::child_process::die_with_parent(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting the example webhooks {}", script.display()))?;
    let stdout = child
        .stdout
        .take()
        .context("the example webhooks' output")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("the example webhooks did not say their port within 30 s")?
        .context("reading the example webhooks' port")?
        .unwrap_or_default();
    let port: u16 = first
        .trim()
        .parse()
        .with_context(|| format!("the example webhooks printed {first:?}, not a port"))?;
    Ok((child, format!("http://127.0.0.1:{port}")))
}

/// Fills the placeholders of every string in `v`.
fn fill(v: &mut Value, hooks_url: &str, kubeconfig: &str, dir: &Path) -> anyhow::Result<()> {
    match v {
        Value::String(s) => {
            if s == "${SANDBOX_KUBECONFIG}" {
                *s = kubeconfig.to_string();
            } else if let Some(chart) = s
                .strip_prefix("${CHART_ARCHIVE:")
                .and_then(|r| r.strip_suffix('}'))
            {
                *s = chart_archive(&dir.join(chart))?;
            } else if s.contains("${HOOKS_URL}") {
                *s = s.replace("${HOOKS_URL}", hooks_url);
            }
        }
        Value::Array(items) => {
            for i in items {
                fill(i, hooks_url, kubeconfig, dir)?;
            }
        }
        Value::Object(map) => {
            for (_, i) in map.iter_mut() {
                fill(i, hooks_url, kubeconfig, dir)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A chart folder as `helm package` would pack it, base64: a gzipped tar whose entries
/// sit under the chart's name.
fn chart_archive(dir: &Path) -> anyhow::Result<String> {
    use base64::Engine as _;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chart".into());
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    tar.append_dir_all(&name, dir)
        .with_context(|| format!("packing the chart {}", dir.display()))?;
    let gz = tar
        .into_inner()
        .and_then(|gz| gz.finish())
        .with_context(|| format!("packing the chart {}", dir.display()))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz))
}

fn describe(doc: &Value) -> String {
    format!(
        "{} {}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// Creates `doc` unless it exists; a kind a CRD just defined is waited for.
async fn create(client: &kube::Client, resolver: &KindResolver, doc: &Value) -> anyhow::Result<()> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + SERVED_WITHIN;
    let resolved = loop {
        match resolver.resolve(Some(api_version), kind).await {
            Ok(r) => break r,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(e).context("its kind is not served");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let namespace = resolved
        .namespaced
        .then(|| doc["metadata"]["namespace"].as_str().unwrap_or("default"));
    let api = RawApi::new(client.clone(), &resolved.resource, namespace);
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    match api.create(doc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled_where_they_stand() {
        let dir = tempfile::tempdir().expect("tempdir");
        let chart = dir.path().join("chart");
        std::fs::create_dir_all(&chart).expect("chart");
        std::fs::write(chart.join("Chart.yaml"), "name: c\n").expect("Chart.yaml");
        let mut doc = json!({
            "url": "${HOOKS_URL}/sync",
            "config": {"kubeconfig": "${SANDBOX_KUBECONFIG}", "other": "${SANDBOX_KUBECONFIG} too"},
            "charts": [{"raw": "${CHART_ARCHIVE:chart}"}],
        });
        fill(
            &mut doc,
            "http://127.0.0.1:1",
            "apiVersion: v1\n",
            dir.path(),
        )
        .expect("filled");
        assert_eq!(doc["url"], "http://127.0.0.1:1/sync");
        assert_eq!(doc["config"]["kubeconfig"], "apiVersion: v1\n");
        assert_eq!(doc["config"]["other"], "${SANDBOX_KUBECONFIG} too");
        let raw = doc["charts"][0]["raw"].as_str().unwrap_or_default();
        use base64::Engine as _;
        let gz = base64::engine::general_purpose::STANDARD
            .decode(raw)
            .expect("base64");
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()));
        let names: Vec<String> = tar
            .entries()
            .expect("entries")
            .filter_map(Result::ok)
            .filter_map(|e| e.path().ok().map(|p| p.display().to_string()))
            .collect();
        assert!(names.iter().any(|n| n == "chart/Chart.yaml"), "{names:?}");
    }
}
