//! The Helm engine: the library or the binary, chosen once at start, behind one interface
//! so that what bosun does with releases (checksums, drift, recovery) is written once.
//!
//! ```text
//!   BOSUN_HELM_ENGINE=library  → libhelm_c.so (HELM_LIB_PATH or the set-up location)
//!   BOSUN_HELM_ENGINE=cli      → the helm binary (HELM_BIN_PATH, else PATH, else .tools)
//!   BOSUN_HELM_ENGINE=auto     → HELM_BIN_PATH set: the binary (addon-operator's setting);
//!                                otherwise the library when present, else a helm binary
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cli::{self, CliClient, HelmCli};
use super::{Action, ClusterOptions, HelmClient, HelmError, HelmLibrary, InstallOptions, Release};

/// `BOSUN_HELM_ENGINE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// `HELM_BIN_PATH` set: the binary; else the library, else a binary found.
    #[default]
    Auto,
    /// The Helm library (`libhelm_c.so`).
    Library,
    /// The `helm` binary.
    Cli,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "library" => Ok(EngineChoice::Library),
            "cli" => Ok(EngineChoice::Cli),
            other => Err(format!(
                "{other:?} is not one of \"auto\", \"library\", \"cli\""
            )),
        }
    }
}

/// What decides the engine.
#[derive(Clone, Debug, Default)]
pub struct EngineSettings {
    /// `BOSUN_HELM_ENGINE`.
    pub choice: EngineChoice,
    /// `HELM_BIN_PATH`.
    pub binary: Option<PathBuf>,
    /// `HELM_LIB_PATH`.
    pub library: Option<PathBuf>,
    /// Where the binary's values files go (`ADDON_OPERATOR_TMP_DIR`).
    pub tmp_dir: PathBuf,
}

/// Which engine the settings ask for, given what is installed.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    Library,
    Cli(PathBuf),
}

/// The decision alone (what exists is passed in), so it is tested without files.
fn pick(
    choice: EngineChoice,
    binary: Option<&Path>,
    library_present: bool,
    found: impl FnOnce() -> Option<PathBuf>,
) -> Option<Pick> {
    match (choice, binary) {
        (EngineChoice::Library, _) => Some(Pick::Library),
        (EngineChoice::Cli | EngineChoice::Auto, Some(bin)) => Some(Pick::Cli(bin.into())),
        (EngineChoice::Cli, None) => Some(Pick::Cli(found().unwrap_or_else(|| "helm".into()))),
        (EngineChoice::Auto, None) if library_present => Some(Pick::Library),
        (EngineChoice::Auto, None) => found().map(Pick::Cli),
    }
}

/// A Helm engine.
#[derive(Clone, Debug)]
pub enum HelmEngine {
    /// The library, in-process.
    Library(HelmLibrary),
    /// The binary, one process per call.
    Cli(HelmCli),
}

impl HelmEngine {
    /// The engine the settings ask for (see the module docs).
    pub async fn select(settings: &EngineSettings) -> Result<HelmEngine, HelmError> {
        // A library path given but no binary path: that library, or its error.
        let choice = match settings.choice {
            EngineChoice::Auto if settings.binary.is_none() && settings.library.is_some() => {
                EngineChoice::Library
            }
            other => other,
        };
        // Loaded only when it may be used: loading starts Helm's Go runtime in-process.
        let library = match (choice, &settings.binary) {
            (EngineChoice::Cli, _) | (EngineChoice::Auto, Some(_)) => None,
            _ => Some(HelmLibrary::load(settings.library.as_deref())),
        };
        let present = matches!(library, Some(Ok(_)));
        match pick(
            choice,
            settings.binary.as_deref(),
            present,
            cli::find_binary,
        ) {
            Some(Pick::Library) => match library {
                Some(loaded) => loaded.map(HelmEngine::Library),
                None => HelmLibrary::load(settings.library.as_deref()).map(HelmEngine::Library),
            },
            Some(Pick::Cli(bin)) => Ok(HelmEngine::Cli(
                HelmCli::open(&bin, &settings.tmp_dir).await?,
            )),
            None => Err(HelmError::NoEngine(format!(
                "{}; and no helm binary on PATH or in .tools/helm",
                library
                    .and_then(Result::err)
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            ))),
        }
    }

    /// `library` or `cli`.
    pub fn kind(&self) -> &'static str {
        match self {
            HelmEngine::Library(_) => "library",
            HelmEngine::Cli(_) => "cli",
        }
    }

    /// Helm's version.
    pub fn version(&self) -> String {
        match self {
            HelmEngine::Library(l) => l.version(),
            HelmEngine::Cli(c) => c.version().to_string(),
        }
    }

    /// The library's or the binary's path.
    pub fn path(&self) -> &Path {
        match self {
            HelmEngine::Library(l) => l.path(),
            HelmEngine::Cli(c) => c.path(),
        }
    }

    /// The field manager of the objects Helm applies: the program it runs in, which for
    /// the library is bosun itself and for the binary is `helm`.
    pub fn field_manager(&self) -> String {
        match self {
            HelmEngine::Library(_) => program_name(),
            HelmEngine::Cli(c) => c.field_manager(),
        }
    }

    /// Renders a chart offline: template path → manifest.
    pub async fn render(
        &self,
        chart: &Path,
        values: &Value,
        release: &str,
        namespace: &str,
        is_upgrade: bool,
    ) -> Result<BTreeMap<String, String>, HelmError> {
        match self {
            HelmEngine::Library(l) => {
                l.render(chart, values, release, namespace, is_upgrade)
                    .await
            }
            HelmEngine::Cli(c) => {
                c.render(chart, values, release, namespace, is_upgrade)
                    .await
            }
        }
    }

    /// A client for releases in one namespace of one cluster.
    pub fn client(&self, options: &ClusterOptions) -> Result<ReleaseClient, HelmError> {
        match self {
            HelmEngine::Library(l) => l.client(options).map(ReleaseClient::Library),
            HelmEngine::Cli(c) => Ok(ReleaseClient::Cli(c.client(options))),
        }
    }
}

/// The base name of the running program (Helm's default field manager).
fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "bosun".to_string())
}

/// Releases in one namespace, through either engine.
#[derive(Clone)]
pub enum ReleaseClient {
    /// Through the library.
    Library(HelmClient),
    /// Through the binary.
    Cli(CliClient),
}

impl ReleaseClient {
    /// Installs or upgrades `release` as `action` says.
    pub async fn deploy(
        &self,
        action: Action,
        chart: &Path,
        release: &str,
        values: &Value,
        o: &InstallOptions,
    ) -> Result<Release, HelmError> {
        match self {
            ReleaseClient::Library(c) => c.deploy(action, chart, release, values, o).await,
            ReleaseClient::Cli(c) => c.deploy(action, chart, release, values, o).await,
        }
    }

    /// `helm uninstall`: when `wait`, until the release's objects are gone; at most
    /// `timeout_seconds` in all.
    pub async fn uninstall(
        &self,
        release: &str,
        wait: bool,
        timeout_seconds: Option<u64>,
    ) -> Result<(), HelmError> {
        match self {
            ReleaseClient::Library(c) => c.uninstall(release, wait, timeout_seconds).await,
            ReleaseClient::Cli(c) => c.uninstall(release, wait, timeout_seconds).await,
        }
    }

    /// `helm status`: the last revision.
    pub async fn status(&self, release: &str) -> Result<Release, HelmError> {
        match self {
            ReleaseClient::Library(c) => c.status(release).await,
            ReleaseClient::Cli(c) => c.status(release).await,
        }
    }

    /// `helm history`, oldest first.
    pub async fn history(&self, release: &str) -> Result<Vec<Release>, HelmError> {
        match self {
            ReleaseClient::Library(c) => c.history(release).await,
            ReleaseClient::Cli(c) => c.history(release).await,
        }
    }

    /// `helm list --all`: releases in every state.
    pub async fn list_all(&self) -> Result<Vec<Release>, HelmError> {
        match self {
            ReleaseClient::Library(c) => c.list_all().await,
            ReleaseClient::Cli(c) => c.list_all().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Option<PathBuf> {
        Some(PathBuf::from("/usr/bin/helm"))
    }

    #[test]
    fn the_engine_follows_the_settings_then_what_is_installed() {
        use EngineChoice::*;
        let bin = Some(Path::new("/opt/helm"));
        let cli = |p: &str| Some(Pick::Cli(PathBuf::from(p)));
        // (choice, HELM_BIN_PATH, library present, binary found) → engine
        type Case<'a> = (EngineChoice, Option<&'a Path>, bool, bool, Option<Pick>);
        let cases: &[Case] = &[
            (Auto, bin, true, true, cli("/opt/helm")),
            (Auto, None, true, true, Some(Pick::Library)),
            (Auto, None, false, true, cli("/usr/bin/helm")),
            (Auto, None, false, false, None),
            (Library, bin, true, true, Some(Pick::Library)),
            (Library, None, false, true, Some(Pick::Library)),
            (Cli, None, true, true, cli("/usr/bin/helm")),
            (Cli, bin, true, false, cli("/opt/helm")),
            (Cli, None, true, false, cli("helm")),
        ];
        for (choice, binary, library, has_binary, want) in cases {
            let got = pick(*choice, *binary, *library, || {
                if *has_binary { found() } else { None }
            });
            assert_eq!(
                &got, want,
                "{choice:?} HELM_BIN_PATH={binary:?} library={library} binary={has_binary}"
            );
        }
    }

    #[test]
    fn engine_choices_parse() {
        assert_eq!("cli".parse(), Ok(EngineChoice::Cli));
        assert_eq!("library".parse(), Ok(EngineChoice::Library));
        assert_eq!("auto".parse(), Ok(EngineChoice::Auto));
        assert!("helm".parse::<EngineChoice>().is_err());
    }
}
