//! The directories services write into while they run (the ESP sequence state), made
//! ready for `daemon.user` before relayd started as root drops to it: after the drop it
//! could neither create them nor write into root's, and every sequence reservation (the
//! first included: the daemon starts the ESP state as `daemon.user`) would fail.

use crate::config::{Config, DaemonUser};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The state directories of every service of `cfg`, each once.
pub fn of(cfg: &Config) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cfg
        .queues
        .iter()
        .flat_map(|q| q.services.iter())
        .chain(cfg.xdp.iter().flat_map(|x| x.services.iter()))
        .flat_map(|(_, f)| f.manifest().state_dirs.iter().cloned())
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Whether `dir` is (or lies under) a directory systemd made for the unit
/// (`StateDirectory=`, passed as `$STATE_DIRECTORY`): systemd gives it back to root at
/// every start of a unit without `User=`, so it is relayd's to give to `daemon.user`.
fn systemds(dir: &Path) -> bool {
    std::env::var_os("STATE_DIRECTORY").is_some_and(|v| {
        v.to_string_lossy()
            .split(':')
            .filter(|s| !s.is_empty())
            .any(|s| dir.starts_with(s))
    })
}

/// Makes every state directory of `cfg` ready for `user` (relayd runs as root): a missing
/// one is created (mode 0700, its missing parents 0755) and given to the user; one that
/// systemd made is given to the user with its files; any other one the user cannot write
/// (not its owner with rwx, or holding files of others) is an error naming `daemon.user`'s
/// line in `cfg` and the command that fixes it.
pub fn prepare(cfg: &Config, user: &DaemonUser) -> Result<(), String> {
    for dir in of(cfg) {
        prepare_one(&dir, user).map_err(|why| {
            format!(
                "{}:{}: daemon.user: relayd drops to `{}` (uid {}), which {why}: its ESP \
                 sequence reservations would fail; as root: chown -R {}:{} {} \
                 && chmod 700 {}",
                cfg.path.display(),
                user.line,
                user.name,
                user.uid,
                user.uid,
                user.gid,
                dir.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

fn prepare_one(dir: &Path, user: &DaemonUser) -> Result<(), String> {
    prepare_in(dir, user, systemds(dir))
}

/// [`prepare_one`], told whether `dir` is systemd's (given to the user whole).
fn prepare_in(dir: &Path, user: &DaemonUser, systemds: bool) -> Result<(), String> {
    // lchown: the directory's entries were the unprivileged user's to make last time, and
    // a link planted among them (to /etc/shadow, say) must not hand its target over.
    let give = |p: &Path| {
        std::os::unix::fs::lchown(p, Some(user.uid), Some(user.gid))
            .map_err(|e| format!("cannot be given the state directory {}: {e}", p.display()))
    };
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| format!("cannot have {} made: {e}", parent.display()))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot have {} made: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot have {} made: {e}", dir.display()))?;
            give(dir)?;
            tracing::info!(dir = %dir.display(), user = %user.name, "made the ESP state directory");
            return Ok(());
        }
        Err(e) => return Err(format!("cannot reach {}: {e}", dir.display())),
    };
    if !meta.is_dir() {
        return Err(format!("cannot use {}: not a directory", dir.display()));
    }
    let entries: Vec<(PathBuf, u32)> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.path(), e.metadata().ok()?)))
        .filter(|(_, m)| m.file_type().is_file())
        .map(|(p, m)| (p, m.uid()))
        .collect();
    if systemds {
        give(dir)?;
        // Only regular files (state files, the ledger): never what a link points to.
        for (p, _) in &entries {
            give(p)?;
        }
        return Ok(());
    }
    if meta.uid() != user.uid || meta.mode() & 0o700 != 0o700 {
        return Err(format!(
            "cannot write the ESP state directory {} (owned by uid {}, mode {:o})",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    if let Some((p, uid)) = entries.iter().find(|(_, uid)| *uid != user.uid) {
        return Err(format!(
            "cannot rewrite {} in the ESP state directory (owned by uid {uid})",
            p.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// systemd's state directory is given to `daemon.user` entry by entry, as root: a
    /// link the user planted there last time must not hand its target over.
    #[test]
    fn a_planted_link_in_systemds_directory_is_not_followed() {
        let base = std::env::temp_dir().join(format!("relayd-state-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (dir, outside) = (base.join("state"), base.join("shadow"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&outside, "root's").unwrap();
        std::fs::write(dir.join("ledger"), "").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("x")).unwrap();
        let user = DaemonUser {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            line: 1,
        };
        prepare_in(&dir, &user, true).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().uid(), 65534);
        assert_eq!(std::fs::metadata(dir.join("ledger")).unwrap().uid(), 65534);
        assert_eq!(
            std::fs::metadata(&outside).unwrap().uid(),
            0,
            "the link's target was given away"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
