//! Where each subsystem's journal lives under the journal folder.

/// The journal of subsystem `name` (`lambda`, `deployer`) under the journal folder `dir`:
/// `dir/name`, or `dir` itself when it is that subsystem's folder (`--journal-dir
/// /var/lib/bosun/journal/deployer` works as well as its parent).
pub fn subsystem_journal(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let sub = dir.join(name);
    if !sub.exists() && dir.file_name().is_some_and(|f| f == name) {
        return dir.to_path_buf();
    }
    sub
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_folder_or_the_subsystem_s_own_folder_finds_its_journal() {
        let top = tempfile::tempdir().expect("tempdir");
        let deployer = top.path().join("deployer");
        std::fs::create_dir_all(&deployer).expect("deployer folder");
        assert_eq!(subsystem_journal(top.path(), "deployer"), deployer);
        assert_eq!(subsystem_journal(&deployer, "deployer"), deployer);
        // Another subsystem's folder is not taken for this one.
        assert_eq!(
            subsystem_journal(&deployer, "lambda"),
            deployer.join("lambda")
        );
    }
}
