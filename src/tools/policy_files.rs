//! `specgate policy export` / `import`: routing policies as TOML files, one per route:
//! `DIR/default/<class>.toml` for the policy of every tenant (`*`) and
//! `DIR/tenants/<tenant>/<class>.toml` for a tenant's own. The files are the same format as
//! the shipped defaults in `policies/defaults/`.

use std::path::Path;

use specgate_policies::{RoutePolicy, WorkloadClass, ANY_TENANT};

use crate::store::policies::{PolicyStore, PolicyStoreError};
use crate::store::tenants::valid_name;

#[derive(Debug, thiserror::Error)]
pub enum PolicyIoError {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error(transparent)]
    Store(#[from] PolicyStoreError),
}

fn file_err(path: &Path, why: impl std::fmt::Display) -> PolicyIoError {
    PolicyIoError::File {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

fn route_dir(dir: &Path, tenant: &str) -> std::path::PathBuf {
    if tenant == ANY_TENANT {
        dir.join("default")
    } else {
        dir.join("tenants").join(tenant)
    }
}

/// Write every stored policy; returns how many.
pub fn export(store: &dyn PolicyStore, dir: &Path) -> Result<usize, PolicyIoError> {
    let all = store.all()?;
    for p in &all {
        let d = route_dir(dir, &p.tenant);
        std::fs::create_dir_all(&d).map_err(|e| file_err(&d, e))?;
        let path = d.join(format!("{}.toml", p.class));
        let text = format!(
            "# {} / {}: version {}, by {} at {}\n{}",
            p.tenant,
            p.class,
            p.version,
            p.updated_by,
            p.updated_at,
            p.policy.to_toml()
        );
        std::fs::write(&path, text).map_err(|e| file_err(&path, e))?;
    }
    Ok(all.len())
}

/// Read the files of `dir` into the store (each a new version of its route, by `by`). Every
/// file is parsed and validated before the first is stored: a bad file imports nothing.
pub fn import(store: &dyn PolicyStore, dir: &Path, by: &str) -> Result<usize, PolicyIoError> {
    let mut routes: Vec<(String, WorkloadClass, RoutePolicy)> = Vec::new();
    let mut read_dir = |tenant: &str, d: &Path| -> Result<(), PolicyIoError> {
        let Ok(entries) = std::fs::read_dir(d) else {
            return Ok(());
        };
        for entry in entries {
            let path = entry.map_err(|e| file_err(d, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let class: WorkloadClass = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .parse()
                .map_err(|e| file_err(&path, e))?;
            let text = std::fs::read_to_string(&path).map_err(|e| file_err(&path, e))?;
            let policy = RoutePolicy::from_toml(&text).map_err(|e| file_err(&path, e))?;
            routes.push((tenant.to_string(), class, policy));
        }
        Ok(())
    };
    read_dir(ANY_TENANT, &dir.join("default"))?;
    let tenants = dir.join("tenants");
    if let Ok(entries) = std::fs::read_dir(&tenants) {
        for entry in entries {
            let path = entry.map_err(|e| file_err(&tenants, e))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if !valid_name(&name) {
                return Err(file_err(&path, "not a valid tenant name"));
            }
            read_dir(&name, &path)?;
        }
    }
    for (tenant, class, policy) in &routes {
        store.put(tenant, *class, policy.clone(), by)?;
    }
    Ok(routes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_then_import_round_trips_and_a_bad_file_imports_nothing() {
        let store = crate::store::Stores::temporary().unwrap().policies;
        store.seed_defaults().unwrap();
        let own = RoutePolicy {
            k_max: 2,
            ..specgate_policies::default_policy(WorkloadClass::Rag)
        };
        store.put("acme", WorkloadClass::Rag, own, "ops").unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            export(store.as_ref(), dir.path()).unwrap(),
            WorkloadClass::ALL.len() + 1
        );

        let fresh = crate::store::Stores::temporary().unwrap().policies;
        assert_eq!(
            import(fresh.as_ref(), dir.path(), "import").unwrap(),
            WorkloadClass::ALL.len() + 1
        );
        let key = |s: &std::sync::Arc<dyn PolicyStore>| {
            let mut v: Vec<_> = s
                .all()
                .unwrap()
                .into_iter()
                .map(|p| (p.tenant, p.class, p.policy))
                .collect();
            v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
            v
        };
        assert_eq!(key(&store), key(&fresh));

        std::fs::write(
            dir.path().join("default/chat.toml"),
            "speculation = true\nk_min = 3\nk_max = 1\n",
        )
        .unwrap();
        let third = crate::store::Stores::temporary().unwrap().policies;
        let err = import(third.as_ref(), dir.path(), "import").unwrap_err();
        assert!(err.to_string().contains("chat.toml"), "{err}");
        assert!(third.all().unwrap().is_empty(), "nothing imported");
    }
}
