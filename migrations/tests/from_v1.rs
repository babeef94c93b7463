//! A version-1 store built from a fixture migrates to the current version with every record
//! found where the new layout puts it.

use serde_json::Value;
use specgate_migrations::{migrate, schema_version, tenant_key, SCHEMA_VERSION};

fn v1_store(dir: &std::path::Path) -> (sled::Db, Value) {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/store_v1.json")).unwrap();
    let db = sled::open(dir.join("store")).unwrap();
    for (tree, records) in fixture["trees"].as_object().unwrap() {
        let t = db.open_tree(tree).unwrap();
        for (k, v) in records.as_object().unwrap() {
            t.insert(k.as_bytes(), serde_json::to_vec(v).unwrap())
                .unwrap();
        }
    }
    let version = fixture["schema_version"].as_u64().unwrap() as u32;
    db.open_tree("meta")
        .unwrap()
        .insert("schema_version", &version.to_be_bytes())
        .unwrap();
    (db, fixture)
}

#[test]
fn a_version_1_store_migrates_and_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let (db, fixture) = v1_store(dir.path());
    assert_eq!(schema_version(&db).unwrap(), 1);
    assert_eq!(migrate(&db).unwrap(), vec![2]);
    assert_eq!(schema_version(&db).unwrap(), SCHEMA_VERSION);

    // Every record is still there, byte for byte.
    for (tree, records) in fixture["trees"].as_object().unwrap() {
        let t = db.open_tree(tree).unwrap();
        assert_eq!(t.len(), records.as_object().unwrap().len(), "{tree}");
        for (k, v) in records.as_object().unwrap() {
            let got: Value = serde_json::from_slice(&t.get(k).unwrap().expect(k)).unwrap();
            assert_eq!(&got, v, "{tree}/{k}");
        }
    }
    // And every key is indexed under its tenant, revoked ones included.
    let index = db.open_tree("tenant_keys").unwrap();
    let keys = fixture["trees"]["api_keys"].as_object().unwrap();
    assert_eq!(index.len(), keys.len());
    for (id, rec) in keys {
        let tenant = rec["tenant"].as_str().unwrap();
        assert!(
            index.contains_key(tenant_key(tenant, id)).unwrap(),
            "{tenant}/{id}"
        );
    }
    let acme: Vec<_> = index.scan_prefix(b"acme\0").collect();
    assert_eq!(acme.len(), 2);

    // Reopening after the migration applies nothing more (every handle must go first: sled
    // holds the file lock while any tree is open).
    drop((index, acme, db));
    let db = sled::open(dir.path().join("store")).unwrap();
    assert!(migrate(&db).unwrap().is_empty());
}
