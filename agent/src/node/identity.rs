//! Who a process is, beyond its pid: executable, cgroup, and the container, Kubernetes pod and
//! systemd unit that cgroup names — so a fleet user filters by service, not by pid.
//!
//! Container runtimes name cgroups in a few known ways; all are recognised from the path alone:
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`,
//!   `crio-<id>.scope`, `docker-<id>.scope`, `libpod-<id>.scope`;
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>`, `/docker/<id>`;
//! - plain services: `/system.slice/nginx.service`.

use std::path::Path;

/// A process's identity as the server stores it with its samples; empty strings where unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub executable: String,
    /// The cgroup path (the v2 one where the process has it, else the first v1 path that names a
    /// container or unit).
    pub cgroup: String,
    /// The 64-hex container id.
    pub container_id: String,
    /// `docker`, `containerd`, `cri-o`, `podman`, or `cgroupfs` when only the id is known.
    pub container_runtime: String,
    /// The Kubernetes pod UID, dashed.
    pub pod_uid: String,
    /// The systemd unit (`nginx.service`).
    pub systemd_unit: String,
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a cgroup path says about containers, pods and units.
pub fn parse_cgroup_path(path: &str) -> Identity {
    let mut id = Identity {
        cgroup: path.to_owned(),
        ..Default::default()
    };
    for component in path.split('/').filter(|c| !c.is_empty()) {
        let bare = component.trim_end_matches(".scope").trim_end_matches(".slice");
        if let Some(i) = bare.rfind("pod") {
            let uid = &bare[i + 3..];
            if uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_') {
                id.pod_uid = uid.replace('_', "-");
            }
        }
        for (prefix, runtime) in [
            ("cri-containerd-", "containerd"),
            ("containerd-", "containerd"),
            ("crio-", "cri-o"),
            ("docker-", "docker"),
            ("libpod-", "podman"),
            ("", "cgroupfs"),
        ] {
            if let Some(rest) = bare.strip_prefix(prefix) {
                if is_container_id(rest) {
                    id.container_id = rest.to_owned();
                    id.container_runtime = runtime.to_owned();
                    break;
                }
            }
        }
        if component.ends_with(".service") {
            id.systemd_unit = component.to_owned();
        }
    }
    if id.container_runtime == "cgroupfs" && path.split('/').any(|c| c == "docker") {
        id.container_runtime = "docker".into();
    }
    id
}

/// Reads the identity of process `pid` from the procfs under `root`; a process that exited
/// gives what could still be read.
pub fn read(root: &Path, pid: u32) -> Identity {
    let dir = root.join("proc").join(pid.to_string());
    let cgroups = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
    // `hierarchy:controllers:path`; prefer a path that names something, the v2 one (`0::`) first.
    let mut paths: Vec<(bool, &str)> = cgroups
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let hierarchy = parts.next()?;
            let _controllers = parts.next()?;
            Some((hierarchy == "0", parts.next()?))
        })
        .collect();
    paths.sort_by_key(|(v2, _)| !v2);
    let mut identity = paths
        .iter()
        .map(|(_, p)| parse_cgroup_path(p))
        .find(|i| !i.container_id.is_empty() || !i.pod_uid.is_empty() || !i.systemd_unit.is_empty())
        .or_else(|| paths.first().map(|(_, p)| parse_cgroup_path(p)))
        .unwrap_or_default();
    identity.executable = std::fs::read_link(dir.join("exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    identity
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4b6a1c9d2e8f7a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a";

    /// The systemd-driver layouts of containerd, CRI-O and Docker give id, runtime and pod.
    #[test]
    fn systemd_driver_paths() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{ID}.scope"
        );
        let id = parse_cgroup_path(&p);
        assert_eq!(id.container_id, ID);
        assert_eq!(id.container_runtime, "containerd");
        assert_eq!(id.pod_uid, "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d");
        assert_eq!(
            parse_cgroup_path(&format!("/kubepods.slice/x/crio-{ID}.scope")).container_runtime,
            "cri-o"
        );
        let docker = parse_cgroup_path(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(
            (docker.container_id.as_str(), docker.container_runtime.as_str()),
            (ID, "docker")
        );
        assert_eq!(docker.systemd_unit, "");
    }

    /// The cgroupfs-driver layouts and plain systemd services.
    #[test]
    fn cgroupfs_paths_and_services() {
        let id = parse_cgroup_path(&format!(
            "/kubepods/burstable/pod0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/{ID}"
        ));
        assert_eq!(
            (id.container_id.as_str(), id.container_runtime.as_str()),
            (ID, "cgroupfs")
        );
        assert_eq!(id.pod_uid, "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d");
        assert_eq!(parse_cgroup_path(&format!("/docker/{ID}")).container_runtime, "docker");
        let svc = parse_cgroup_path("/system.slice/nginx.service");
        assert_eq!(
            (svc.systemd_unit.as_str(), svc.container_id.as_str()),
            ("nginx.service", "")
        );
        assert_eq!(
            parse_cgroup_path("/"),
            Identity {
                cgroup: "/".into(),
                ..Default::default()
            }
        );
    }
}
