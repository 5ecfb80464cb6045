//! Finding modules in `MODULES_DIR`: `NNN-kebab-name` directories (symlinks followed),
//! their chart, `enabled` script, static values and flags, CRDs and hooks.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bosun_addon::modules::ModuleDef;
use bosun_addon::schema::ValuesSchemas;
use bosun_addon::values::{layered, name_round_trips, values_key};
use serde_json::{Value, json};

use crate::hooks::discover;

/// A module directory that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModuleLoadError {
    /// A directory or file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// What.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Invalid content, named by file and field.
    #[error("{path}: {message}")]
    Invalid {
        /// Which file or directory.
        path: PathBuf,
        /// What was expected.
        message: String,
    },
}

fn invalid(path: &Path, message: impl Into<String>) -> ModuleLoadError {
    ModuleLoadError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModuleLoadError + '_ {
    move |source| ModuleLoadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How modules are read.
#[derive(Clone, Debug)]
pub struct DiscoveryOptions {
    /// `UNNUMBERED_MODULES_ORDER`.
    pub unnumbered_order: u32,
    /// `ADDON_OPERATOR_CRD_FILTER_PREFIXES`: CRD files starting with these are skipped.
    pub crd_filter_prefixes: Vec<String>,
    /// `ADDON_OPERATOR_CRD_EXTRA_LABELS`: labels added to every CRD.
    pub crd_extra_labels: BTreeMap<String, String>,
    /// Where chart views (module charts without the module's other files) are built.
    pub charts_dir: PathBuf,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions {
            unnumbered_order: 1,
            crd_filter_prefixes: vec!["doc-".into(), "_".into()],
            crd_extra_labels: BTreeMap::from([("heritage".into(), "addon-operator".into())]),
            charts_dir: std::env::temp_dir().join("bosun-charts"),
        }
    }
}

/// Splits `NNN-name` into order and name.
pub fn parse_dir_name(dir_name: &str, unnumbered: u32) -> (u32, String) {
    if let Some((prefix, rest)) = dir_name.split_once('-')
        && !prefix.is_empty()
        && prefix.bytes().all(|b| b.is_ascii_digit())
        && !rest.is_empty()
        && let Ok(order) = prefix.parse::<u32>()
        && order <= i32::MAX as u32
    {
        return (order, rest.to_string());
    }
    (unnumbered, dir_name.to_string())
}

/// Helm's rule for release names (the module name is its release's name): at most 53
/// characters, lowercase letters, digits, `-` and `.`, starting and ending with a letter
/// or digit. Names it breaks would be loaded and then fail at every install.
pub fn helm_release_name(name: &str) -> Result<(), String> {
    const MAX: usize = 53;
    if name.len() > MAX {
        return Err(format!(
            "{} characters, Helm allows at most {MAX}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Err(format!(
            "{c:?} is not allowed (lowercase letters, digits, '-' and '.' only)"
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Err("it must start and end with a letter or digit".into());
    }
    Ok(())
}

fn read_yaml(path: &Path) -> Result<Option<Value>, ModuleLoadError> {
    // Only a regular file is read: a FIFO or a device would block the start for good.
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(invalid(path, "not a regular file".to_string()));
        }
        _ => {}
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let v: Value =
        serde_saphyr::from_str(&text).map_err(|e| invalid(path, format!("invalid YAML: {e}")))?;
    Ok(Some(v))
}

/// A module's section of one values.yaml and its `<key>Enabled` flag.
type ValuesOf = (Option<Value>, Option<bool>);

/// The module's section and `<key>Enabled` flag from one values.yaml.
fn values_file(path: &Path, key: &str) -> Result<ValuesOf, ModuleLoadError> {
    values_of(path, read_yaml(path)?.as_ref(), key)
}

/// The module's section and `<key>Enabled` flag from the document of one values.yaml
/// (`path`, for errors); none when there is no such file.
fn values_of(path: &Path, doc: Option<&Value>, key: &str) -> Result<ValuesOf, ModuleLoadError> {
    let Some(doc) = doc else {
        return Ok((None, None));
    };
    if doc.is_null() {
        return Ok((None, None));
    }
    if !doc.is_object() {
        return Err(invalid(path, "expected a mapping at the top level"));
    }
    let section = match &doc[key] {
        Value::Null => None,
        v @ Value::Object(_) => Some(v.clone()),
        other => {
            return Err(invalid(
                path,
                format!("key {key:?} must be a mapping, got {other}"),
            ));
        }
    };
    let flag_key = format!("{key}Enabled");
    let flag = match &doc[&flag_key] {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        other => {
            return Err(invalid(
                path,
                format!("key {flag_key:?} must be true or false, got {other}"),
            ));
        }
    };
    Ok((section, flag))
}

/// Reads and compiles `openapi/config-values.yaml` and `openapi/values.yaml` under `dir`.
pub fn load_schemas(dir: &Path, scope: &str) -> Result<ValuesSchemas, ModuleLoadError> {
    let openapi = dir.join("openapi");
    let config = read_yaml(&openapi.join("config-values.yaml"))?;
    let values = read_yaml(&openapi.join("values.yaml"))?;
    ValuesSchemas::new(scope, config, values).map_err(|e| invalid(&openapi, e.to_string()))
}

/// Reads every module of the given directories, sorted by order then name.
pub fn discover_modules(
    dirs: &[PathBuf],
    options: &DiscoveryOptions,
) -> Result<(Vec<ModuleDef>, Vec<String>), ModuleLoadError> {
    let mut modules: Vec<ModuleDef> = Vec::new();
    let mut warnings = Vec::new();
    let mut common = CommonValues::new(dirs);
    for dir in dirs {
        if !dir.exists() {
            warnings.push(format!(
                "modules directory {} does not exist",
                dir.display()
            ));
            continue;
        }
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let dir_name = entry.file_name().to_string_lossy().to_string();
            if dir_name.starts_with('.') {
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => continue,
                Err(e) => {
                    warnings.push(format!(
                        "{}: skipped, not a readable directory (broken symlink?): {e}",
                        path.display()
                    ));
                    continue;
                }
            }
            let module = load_module(&mut common, &path, &dir_name, options, &mut warnings)?;
            if let Some(other) = modules.iter().find(|m| m.name == module.name) {
                return Err(invalid(
                    &path,
                    format!(
                        "module {:?} is already defined by {}",
                        module.name,
                        other.dir.display()
                    ),
                ));
            }
            modules.push(module);
        }
    }
    modules.sort_by(|a, b| (a.order, &a.name).cmp(&(b.order, &b.name)));
    Ok((modules, warnings))
}

/// The `values.yaml` at the top of each modules directory, which every module reads its
/// section and flag from: each read and parsed once per discovery (on first use), not
/// once per module.
struct CommonValues {
    files: Vec<PathBuf>,
    docs: Vec<Option<Option<Value>>>,
}

impl CommonValues {
    fn new(dirs: &[PathBuf]) -> CommonValues {
        CommonValues {
            files: dirs.iter().map(|d| d.join("values.yaml")).collect(),
            docs: vec![None; dirs.len()],
        }
    }

    /// The section and flag of `key` from each file, in the directories' order.
    fn values(&mut self, key: &str) -> Result<Vec<ValuesOf>, ModuleLoadError> {
        let mut out = Vec::with_capacity(self.files.len());
        for (file, doc) in self.files.iter().zip(self.docs.iter_mut()) {
            let doc = match doc {
                Some(doc) => doc,
                None => doc.insert(read_yaml(file)?),
            };
            out.push(values_of(file, doc.as_ref(), key)?);
        }
        Ok(out)
    }
}

fn load_module(
    common: &mut CommonValues,
    path: &Path,
    dir_name: &str,
    options: &DiscoveryOptions,
    warnings: &mut Vec<String>,
) -> Result<ModuleDef, ModuleLoadError> {
    let (order, name) = parse_dir_name(dir_name, options.unnumbered_order);
    if !name_round_trips(&name) {
        return Err(invalid(
            path,
            format!(
                "module name {name:?} is not kebab case that survives camelCase and back (values key {:?})",
                values_key(&name)
            ),
        ));
    }
    if let Err(rule) = helm_release_name(&name) {
        return Err(invalid(
            path,
            format!("module name {name:?} cannot be a Helm release name: {rule}"),
        ));
    }
    let key = values_key(&name);
    let mut sections = Vec::new();
    let mut static_enabled = None;
    for (section, flag) in common
        .values(&key)?
        .into_iter()
        .chain([values_file(&path.join("values.yaml"), &key)?])
    {
        sections.extend(section);
        if flag.is_some() {
            static_enabled = flag;
        }
    }
    let enabled_script = match std::fs::metadata(path.join("enabled")) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Some(path.join("enabled")),
        Ok(m) if m.is_file() => {
            warnings.push(format!(
                "{}: not executable; the module is treated as enabled by it",
                path.join("enabled").display()
            ));
            None
        }
        _ => None,
    };
    let chart = if path.join("Chart.yaml").is_file() || path.join("templates").is_dir() {
        Some(chart_view(path, &name, &options.charts_dir)?)
    } else {
        None
    };
    let hooks_dir = path.join("hooks");
    let hooks = if hooks_dir.is_dir() {
        let (found, w) = discover(&hooks_dir, true).map_err(io(&hooks_dir))?;
        warnings.extend(w);
        found
            .into_iter()
            .map(|h| {
                let rel = h.name.trim_start_matches("hooks/");
                (format!("{dir_name}/hooks/{rel}"), h.path)
            })
            .collect()
    } else {
        Vec::new()
    };
    let schemas = std::sync::Arc::new(load_schemas(path, &name)?);
    Ok(ModuleDef {
        name,
        order,
        dir: path.to_path_buf(),
        chart,
        enabled_script,
        static_values: layered(sections.iter()),
        static_enabled,
        crds: load_crds(&path.join("crds"), options)?,
        hooks,
        schemas,
    })
}

/// Files of a module directory that are not part of its chart.
const NOT_CHART: &[&str] = &[
    "crds",
    "docs",
    "hooks",
    "images",
    "lib",
    "enabled",
    "openapi",
    "Chart.yaml",
];

/// Builds the chart Helm sees: a copy of the module directory without its non-chart files (so
/// `crds/` is applied by bosun, not by Helm), with the module's `Chart.yaml` or, when it
/// has none, `name: <module>, version: 0.2.0` as the reference synthesizes.
fn chart_view(
    module_dir: &Path,
    name: &str,
    charts_dir: &Path,
) -> Result<PathBuf, ModuleLoadError> {
    let view = charts_dir.join(name);
    if std::fs::symlink_metadata(&view).is_ok() {
        std::fs::remove_dir_all(&view).map_err(io(&view))?;
    }
    bosun_platform::create_private_dir(&view).map_err(io(&view))?;
    let source = std::fs::canonicalize(module_dir).map_err(io(module_dir))?;
    for entry in std::fs::read_dir(&source).map_err(io(&source))? {
        let entry = entry.map_err(io(&source))?;
        let file = entry.file_name().to_string_lossy().to_string();
        if NOT_CHART.contains(&file.as_str()) {
            continue;
        }
        copy_all(&entry.path(), &view.join(&file))?;
    }
    let chart_yaml = source.join("Chart.yaml");
    if chart_yaml.is_file() {
        copy_all(&chart_yaml, &view.join("Chart.yaml"))?;
    } else {
        let chart_yaml = view.join("Chart.yaml");
        write_private(
            &chart_yaml,
            &mut format!("apiVersion: v2\nname: {name}\nversion: 0.2.0\n").as_bytes(),
        )
        .map_err(io(&chart_yaml))?;
    }
    Ok(view)
}

/// Copies a file or a directory tree (following symlinks) as private copies: `0700` folders,
/// `0600` files (values and templates may hold secrets).
fn copy_all(from: &Path, to: &Path) -> Result<(), ModuleLoadError> {
    if std::fs::metadata(from).map_err(io(from))?.is_dir() {
        bosun_platform::create_private_dir(to).map_err(io(to))?;
        for entry in std::fs::read_dir(from).map_err(io(from))? {
            let entry = entry.map_err(io(from))?;
            copy_all(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        let mut source = std::fs::File::open(from).map_err(io(from))?;
        write_private(to, &mut source).map_err(io(to))
    }
}

/// Writes a new `0600` file at `to` (one already there, or a link, is refused).
fn write_private(to: &Path, contents: &mut impl std::io::Read) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    std::io::copy(contents, &mut file).map(|_| ())
}

fn load_crds(dir: &Path, options: &DiscoveryOptions) -> Result<Vec<Value>, ModuleLoadError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
                && !options
                    .crd_filter_prefixes
                    .iter()
                    .any(|prefix| !prefix.is_empty() && name.starts_with(prefix.as_str()))
        })
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(io(&file))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| invalid(&file, format!("invalid YAML: {e}")))?;
        for (i, mut doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            if doc["kind"] != "CustomResourceDefinition" {
                return Err(invalid(
                    &file,
                    format!(
                        "document {i}: expected kind CustomResourceDefinition, got {}",
                        doc["kind"]
                    ),
                ));
            }
            if !doc["metadata"]["labels"].is_object() {
                doc["metadata"]["labels"] = json!({});
            }
            for (k, v) in &options.crd_extra_labels {
                doc["metadata"]["labels"][k] = json!(v);
            }
            crds.push(doc);
        }
    }
    Ok(crds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_prefix_and_unnumbered_modules() {
        assert_eq!(
            parse_dir_name("001-some-module", 1),
            (1, "some-module".into())
        );
        assert_eq!(parse_dir_name("20-a", 1), (20, "a".into()));
        assert_eq!(parse_dir_name("plain", 7), (7, "plain".into()));
        assert_eq!(parse_dir_name("x1-a", 7), (7, "x1-a".into()));
        assert_eq!(
            parse_dir_name("99999999999-a", 3),
            (3, "99999999999-a".into())
        );
    }

    #[test]
    fn module_names_helm_rejects_are_refused_naming_the_rule() {
        let long = "a".repeat(54);
        for (name, rule) in [
            ("has space", "' ' is not allowed"),
            ("caf\u{e9}", "'\u{e9}' is not allowed"),
            (long.as_str(), "54 characters, Helm allows at most 53"),
            ("ends-", "start and end with a letter or digit"),
        ] {
            let err = helm_release_name(name).expect_err(name);
            assert!(err.contains(rule), "{name}: {err}");
        }
        for name in ["a", "my-module", "v1.2", &"a".repeat(53)] {
            assert_eq!(helm_release_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn a_module_dir_with_a_name_helm_rejects_or_a_fifo_values_file_fails_at_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let modules = dir.path();
        std::fs::create_dir_all(modules.join("010-has space")).expect("mkdir");
        let options = DiscoveryOptions::default();
        let err =
            discover_modules(&[modules.to_path_buf()], &options).expect_err("the name is refused");
        assert!(
            err.to_string().contains("010-has space") && err.to_string().contains("Helm"),
            "{err}"
        );
        std::fs::remove_dir(modules.join("010-has space")).expect("rmdir");
        std::fs::create_dir_all(modules.join("020-ok")).expect("mkdir");
        let fifo = modules.join("020-ok/values.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let err =
            discover_modules(&[modules.to_path_buf()], &options).expect_err("a FIFO is not read");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn the_directory_values_file_gives_each_module_its_section_and_the_module_file_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let modules = dir.path();
        for m in ["010-alpha", "020-beta", "030-gamma"] {
            std::fs::create_dir_all(modules.join(m)).expect("mkdir");
        }
        std::fs::write(
            modules.join("values.yaml"),
            "alpha: {a: 1}\nalphaEnabled: false\nbeta: {b: 2}\nbetaEnabled: true\n",
        )
        .expect("write");
        std::fs::write(
            modules.join("020-beta/values.yaml"),
            "beta: {c: 3}\nbetaEnabled: false\n",
        )
        .expect("write");
        let options = DiscoveryOptions::default();
        let (found, _) = discover_modules(&[modules.to_path_buf()], &options).expect("discovered");
        let by_name = |n: &str| found.iter().find(|m| m.name == n).expect(n);
        assert_eq!(by_name("alpha").static_values, json!({"a": 1}));
        assert_eq!(by_name("alpha").static_enabled, Some(false));
        assert_eq!(by_name("beta").static_values, json!({"b": 2, "c": 3}));
        assert_eq!(by_name("beta").static_enabled, Some(false));
        assert_eq!(by_name("gamma").static_enabled, None);

        // A broken directory file is named, whichever module reads it first.
        std::fs::write(modules.join("values.yaml"), "alphaEnabled: [\n").expect("write");
        let err = discover_modules(&[modules.to_path_buf()], &options).expect_err("invalid YAML");
        assert!(
            err.to_string().contains("values.yaml") && err.to_string().contains("invalid YAML"),
            "{err}"
        );
    }
}
