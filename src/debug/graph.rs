//! `/graph`: the modules in run order as the reference's "Module Scheduler's Graph" — one
//! vertex per order (weight), chained from the lowest, each module hanging off its order —
//! in DOT, or as a PNG drawn by graphviz's `dot` program when it is installed.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// How long `dot` may take to draw the graph.
const DOT_TIMEOUT: Duration = Duration::from_secs(20);

/// A module as the graph shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleVertex {
    /// Module name.
    pub name: String,
    /// Its order (the numeric prefix of its folder).
    pub weight: u32,
    /// Whether it is enabled now.
    pub enabled: bool,
}

/// A DOT string literal.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The id of an order's vertex (a space keeps it apart from every module name).
fn weight_id(weight: u32) -> String {
    quoted(&format!("weight {weight}"))
}

/// The DOT description: order vertices (blue) chained in run order, each module (green
/// when enabled, grey when disabled) attached to its order and labelled with its name,
/// order and state.
pub fn dot(modules: &[ModuleVertex]) -> String {
    let mut weights: Vec<u32> = modules.iter().map(|m| m.weight).collect();
    weights.sort_unstable();
    weights.dedup();
    let mut out = String::from(
        "strict digraph {\n\tgraph [label=\"Module Scheduler's Graph\", labelloc=\"t\"];\n\n",
    );
    for w in &weights {
        out.push_str(&format!(
            "\t{} [label=\"{w}\", shape=\"box\", colorscheme=\"blues3\", style=\"filled\", color=\"2\", fillcolor=\"1\", weight={w}];\n",
            weight_id(*w)
        ));
    }
    for pair in weights.windows(2) {
        out.push_str(&format!(
            "\t{} -> {};\n",
            weight_id(pair[0]),
            weight_id(pair[1])
        ));
    }
    out.push('\n');
    for m in modules {
        let (state, style) = if m.enabled {
            (
                "enabled",
                "colorscheme=\"greens3\", style=\"filled\", color=\"2\", fillcolor=\"1\"",
            )
        } else {
            (
                "disabled",
                "style=\"filled,dashed\", color=\"gray50\", fillcolor=\"gray90\", fontcolor=\"gray40\"",
            )
        };
        let label =
            quoted(&format!("{}\nweight {}, {state}", m.name, m.weight)).replace('\n', "\\n");
        out.push_str(&format!(
            "\t{} [label={label}, {style}];\n\t{} -> {};\n",
            quoted(&m.name),
            weight_id(m.weight),
            quoted(&m.name)
        ));
    }
    out.push_str("}\n");
    out
}

/// Why the graph could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// graphviz is not installed (or `GRAPHVIZ_DOT` names nothing runnable).
    #[error(
        "drawing the graph as PNG needs graphviz's `dot` program, and {0} could not be started: {1}; install graphviz (or set GRAPHVIZ_DOT to its `dot`), or ask for the DOT text with /graph?format=text"
    )]
    NoGraphviz(String, std::io::Error),
    /// `dot` ran and failed.
    #[error("{program} could not draw the graph: {message}")]
    Failed {
        /// The program that ran.
        program: String,
        /// What went wrong.
        message: String,
    },
}

/// The `dot` program: `GRAPHVIZ_DOT`, else `dot` on `PATH`.
pub fn dot_program() -> String {
    std::env::var("GRAPHVIZ_DOT")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "dot".to_string())
}

/// Draws `dot_text` as a PNG with `program -Tpng`.
pub async fn png(program: &str, dot_text: &str) -> Result<Vec<u8>, GraphError> {
    let failed = |message: String| GraphError::Failed {
        program: program.to_string(),
        message,
    };
    let mut child = tokio::process::Command::new(program)
        .arg("-Tpng")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| GraphError::NoGraphviz(program.to_string(), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot_text.as_bytes())
            .await
            .map_err(|e| failed(format!("cannot write the graph to it: {e}")))?;
    }
    let out = tokio::time::timeout(DOT_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| failed(format!("no answer within {}s", DOT_TIMEOUT.as_secs())))?
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &str, weight: u32, enabled: bool) -> ModuleVertex {
        ModuleVertex {
            name: name.into(),
            weight,
            enabled,
        }
    }

    #[test]
    fn orders_are_chained_and_modules_hang_off_theirs() {
        let text = dot(&[
            module("nginx-ingress", 1, true),
            module("some-module", 2, false),
            module("echo", 10, true),
            module("toggled", 10, true),
        ]);
        assert!(text.starts_with("strict digraph {\n"), "{text}");
        assert!(
            text.contains("label=\"Module Scheduler's Graph\""),
            "{text}"
        );
        let edges: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.contains(" -> "))
            .collect();
        assert_eq!(
            edges,
            [
                "\"weight 1\" -> \"weight 2\";",
                "\"weight 2\" -> \"weight 10\";",
                "\"weight 1\" -> \"nginx-ingress\";",
                "\"weight 2\" -> \"some-module\";",
                "\"weight 10\" -> \"echo\";",
                "\"weight 10\" -> \"toggled\";",
            ]
        );
        assert!(
            text.contains(
                "\"some-module\" [label=\"some-module\\nweight 2, disabled\", style=\"filled,dashed\""
            ),
            "{text}"
        );
        assert!(
            text.contains("\"echo\" [label=\"echo\\nweight 10, enabled\", colorscheme=\"greens3\""),
            "{text}"
        );
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn no_modules_is_an_empty_graph() {
        let text = dot(&[]);
        assert!(!text.contains("->") && text.ends_with("}\n"), "{text}");
    }

    #[tokio::test]
    async fn without_graphviz_the_error_says_what_to_do() {
        let err = png("/nonexistent/graphviz/dot", "digraph {}")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("install graphviz") && err.contains("/graph?format=text"),
            "{err}"
        );
    }
}
