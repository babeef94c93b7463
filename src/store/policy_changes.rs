//! Which policy changes a route went through in a time range, for the analyst's time axis: the
//! route's own versions, and the default's (tenant `*`) while the route had no policy of its
//! own, so a default edit is marked only where it took effect. Pure: versions in, marks out.

use std::collections::HashMap;

use serde::Serialize;
use specgate_policies::WorkloadClass;

use super::policies::{PolicyVersion, SHIPPED_BY};

/// Who a tenant reader sees as the author of an admin's change (the admin's name stays with
/// the admins); specgate's own authors are shown as they are.
const AN_ADMIN: &str = "admin";
const SYSTEM_AUTHORS: [&str; 2] = [SHIPPED_BY, "shadow check"];

/// One change on one route's time axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteChange {
    pub tenant: String,
    pub class: &'static str,
    /// The version of the route's own policy, or of the default's when `default`.
    pub version: u32,
    pub default: bool,
    /// "put" or "delete".
    pub action: String,
    pub by: String,
    pub at: u64,
}

/// Whether the route has a policy of its own at `at`: its latest version by then is a put.
fn has_own(own: &[PolicyVersion], at: u64) -> bool {
    own.iter()
        .filter(|v| v.at <= at)
        .max_by_key(|v| v.version)
        .is_some_and(|v| v.action == "put")
}

/// The changes in `[from, to)` on each route, oldest first. `own` holds each route's versions,
/// `defaults` the `*` versions per class; `admin_reader` keeps the admins' names, which a
/// tenant reader sees as "admin".
pub fn route_changes(
    routes: &[(String, WorkloadClass)],
    own: &HashMap<(String, WorkloadClass), Vec<PolicyVersion>>,
    defaults: &HashMap<WorkloadClass, Vec<PolicyVersion>>,
    (from, to): (u64, u64),
    admin_reader: bool,
) -> Vec<RouteChange> {
    let mut out = Vec::new();
    for (tenant, class) in routes {
        let mine = own.get(&(tenant.clone(), *class)).map_or(&[][..], |v| v);
        let shared = defaults.get(class).map_or(&[][..], |v| v);
        let own_marks = mine.iter().map(|v| (v, false));
        let default_marks = shared
            .iter()
            .filter(|v| !has_own(mine, v.at))
            .map(|v| (v, true));
        for (v, default) in own_marks.chain(default_marks) {
            if !(from..to).contains(&v.at) {
                continue;
            }
            let by = if admin_reader || SYSTEM_AUTHORS.contains(&v.by.as_str()) {
                v.by.clone()
            } else {
                AN_ADMIN.to_string()
            };
            out.push(RouteChange {
                tenant: tenant.clone(),
                class: class.name(),
                version: v.version,
                default,
                action: v.action.clone(),
                by,
                at: v.at,
            });
        }
    }
    out.sort_by(|a, b| (a.at, &a.tenant, a.class).cmp(&(b.at, &b.tenant, b.class)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(version: u32, action: &str, by: &str, at: u64) -> PolicyVersion {
        PolicyVersion {
            version,
            action: action.into(),
            policy: None,
            by: by.into(),
            at,
        }
    }

    #[test]
    fn a_default_edit_marks_only_the_routes_that_followed_the_default_then() {
        let chat = WorkloadClass::Chat;
        let routes = vec![("a".to_string(), chat), ("b".to_string(), chat)];
        // a has its own policy from 100 to 300; b never has one.
        let own = HashMap::from([(
            ("a".to_string(), chat),
            vec![
                version(1, "put", "ops-alice", 100),
                version(2, "delete", "ops-alice", 300),
            ],
        )]);
        let defaults = HashMap::from([(
            chat,
            vec![
                version(1, "put", SHIPPED_BY, 10),
                version(2, "put", "ops-bob", 200),
                version(3, "put", "ops-bob", 400),
            ],
        )]);
        let marks = route_changes(&routes, &own, &defaults, (50, 1000), true);
        let of = |t: &str| -> Vec<(u32, bool, u64)> {
            marks
                .iter()
                .filter(|m| m.tenant == t)
                .map(|m| (m.version, m.default, m.at))
                .collect()
        };
        // The default's v1 is before the range; its v2 came while a had its own policy.
        assert_eq!(of("a"), [(1, false, 100), (2, false, 300), (3, true, 400)]);
        assert_eq!(of("b"), [(2, true, 200), (3, true, 400)]);
        // A tenant reader sees that an admin made a change, not which one.
        let as_tenant = route_changes(&routes[1..], &own, &defaults, (0, 1000), false);
        let authors: Vec<&str> = as_tenant.iter().map(|m| m.by.as_str()).collect();
        assert_eq!(authors, [SHIPPED_BY, AN_ADMIN, AN_ADMIN]);
    }
}
