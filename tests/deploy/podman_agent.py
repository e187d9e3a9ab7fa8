#!/usr/bin/env python3
"""The agent's image, run by podman under exactly the confinement its DaemonSet gives it, samples
a workload on this machine, and its batches reach a server.

No Kubernetes cluster can run here (issue 21); this is the nearest real thing. The container's
flags are not written here but read from the rendered DaemonSet (deploy/kubernetes/, the trial
variant: no TLS or tokens, whose Secrets no cluster holds here): its container's security context
(capabilities dropped and added, read-only root filesystem, no privilege escalation, user), the
pod's host PID namespace, its hostPath volumes and their mounts, its environment (the downward
API's node name resolved and `$(VAR)` expanded as the kubelet does) and its memory limit. What
differs, because there is no cluster: the container joins the host's network to reach a server on
loopback (a pod reaches the server's Service); the spool's host directory is a temporary one; the
metrics address is a free loopback port; BIMODAL_KUBERNETES is left out (no API server to list
pods from). Seccomp: the DaemonSet asks for the runtime's default profile; this podman's (Debian
12) allows `bpf` and `perf_event_open` only with CAP_SYS_ADMIN, where containerd's, which most
kubelets run, allows them with CAP_BPF and CAP_PERFMON: the test gives podman its own profile with
containerd's rule for those two calls (runtime_default_seccomp).

Checked: the agent process holds exactly the capabilities the DaemonSet adds (CapEff), no new
privileges, a read-only root; its metrics answer (the liveness probe's path); the server stores
this node's samples with the workload's own function, spin_hot_loop, in their stacks; the agent
ends cleanly on SIGTERM within the pod's grace period.

Usage: tests/deploy/podman_agent.py   (builds the images with tools/images.sh unless
BIMODAL_AGENT_IMAGE names one already built)
"""

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "deploy/kubernetes/bimodal-trial.yaml")
# The binaries of the images' build (tools/images.sh: IMAGE_PROFILE, release unless given).
PROFILE = os.environ.get("IMAGE_PROFILE", "release")
# cargo's `dev` profile builds into target/debug
SERVER = os.path.join(ROOT, "target", "debug" if PROFILE == "dev" else PROFILE, "bimodal-server")
NODE = "podman-node"
CONTAINER = "bimodal-agent-podman-test"
# Capability numbers (linux/capability.h) of the names a DaemonSet adds.
CAPABILITIES = {"DAC_READ_SEARCH": 2, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
                "PERFMON": 38, "BPF": 39}
# The first event takes a cold start of the server's ClickHouse and an agent interval or two.
DEADLINE = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def daemonset():
    with open(MANIFEST) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    return ds


def quantity_bytes(q):
    """A Kubernetes memory quantity in bytes (the suffixes a limit uses)."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"(\d+)([KMG]i?)?", str(q))
    assert m, f"memory quantity {q!r}"
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


def runtime_default_seccomp(out):
    """The runtime's default seccomp profile as a kubelet's containerd (1.7 and later) applies it
    for RuntimeDefault: podman's own default from Debian 12's containers-common, in which `bpf` and
    `perf_event_open` are allowed only with CAP_SYS_ADMIN, with containerd's rule instead: `bpf`
    with CAP_BPF, `perf_event_open` with CAP_PERFMON (containerd PR 7301, moby PR 43987;
    containers-common took the same in 2025). Everything else is podman's profile unchanged."""
    with open("/usr/share/containers/seccomp.json") as f:
        profile = json.load(f)
    gated = {"bpf": "CAP_BPF", "perf_event_open": "CAP_PERFMON"}
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in gated]
        if names:
            rules.append(dict(rule, names=names))
    for name, cap in gated.items():
        for needs in (cap, "CAP_SYS_ADMIN"):
            rules.append({"names": [name], "action": "SCMP_ACT_ALLOW", "includes": {"caps": [needs]}})
    profile["syscalls"] = rules
    with open(out, "w") as f:
        json.dump(profile, f)
    return out


def podman_args(ds, server_url, metrics, spool, seccomp):
    """The `podman run` flags for the DaemonSet's agent container, from the DaemonSet itself."""
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert not sc.get("privileged"), "the agent must never be privileged"
    # runc, as most kubelets' runtimes use: crun refuses this machine's hybrid cgroup v1/v2
    # layout. Limits within this process's own: podman's defaults (and even `host`) raise the
    # open-files and processes limits, which this machine's root may not (it lacks
    # CAP_SYS_RESOURCE, as the agent does); a kubelet's runtime applies its own.
    files = resource.getrlimit(resource.RLIMIT_NOFILE)
    processes = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], 32768)
    args = ["--name", CONTAINER, "--runtime=runc", "--network=host",
            f"--ulimit=nofile={files[0]}:{files[1]}", f"--ulimit=nproc={processes}:{processes}"]
    if pod.get("hostPID"):
        args.append("--pid=host")
    caps = sc.get("capabilities", {})
    for cap in caps.get("drop", []):
        args.append(f"--cap-drop={cap.lower()}")
    for cap in caps.get("add", []):
        args.append(f"--cap-add=CAP_{cap}")
    if sc.get("readOnlyRootFilesystem"):
        # Kubernetes mounts no tmpfs of its own on a read-only root; podman would (/tmp, /run).
        args += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    assert sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", sc
    args.append(f"--security-opt=seccomp={runtime_default_seccomp(seccomp)}")
    if "runAsUser" in sc:
        args.append(f"--user={sc['runAsUser']}")
    limit = c.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        args.append(f"--memory={quantity_bytes(limit)}")

    volumes = {}
    for v in pod.get("volumes", []):
        assert "hostPath" in v, f"volume {v['name']}: only hostPath volumes can be given here: {v}"
        path = v["hostPath"]["path"]
        if v["name"] == "spool":
            path = spool
        elif v["hostPath"].get("type") == "DirectoryOrCreate":
            os.makedirs(path, exist_ok=True)
        volumes[v["name"]] = path
    for m in c.get("volumeMounts", []):
        args += ["-v", f"{volumes[m['name']]}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")]

    env = {}
    for e in c.get("env", []):
        name = e["name"]
        if name == "BIMODAL_KUBERNETES":
            continue
        if "valueFrom" in e:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            value = NODE if field == "spec.nodeName" else ""
            assert field == "spec.nodeName" or field.startswith("metadata.labels["), field
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        env[name] = value
    env["BIMODAL_SERVER_URL"] = server_url
    env["BIMODAL_METRICS_LISTEN"] = metrics
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    return args, c.get("args", []), pod.get("terminationGracePeriodSeconds", 30), caps.get("add", [])


def main():
    image = os.environ.get("BIMODAL_AGENT_IMAGE")
    if not image:
        subprocess.run([os.path.join(ROOT, "tools/images.sh"), "test"], check=True)
        image = "localhost/bimodal-agent:test"
    tmp = tempfile.mkdtemp(prefix="bimodal-podman-")
    procs = []
    subprocess.run(["podman", "rm", "-f", "-i", CONTAINER], capture_output=True)
    try:
        port = free_port()
        server_url = f"http://127.0.0.1:{port}"
        server_log = open(os.path.join(tmp, "server.log"), "w")
        procs.append(subprocess.Popen([SERVER, "--listen", f"127.0.0.1:{port}", "--data-dir",
                                       os.path.join(tmp, "server")], stdout=server_log, stderr=server_log))
        deadline = time.time() + DEADLINE
        while True:
            try:
                if get(server_url + "/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline and procs[0].poll() is None, f"server did not start: {server_log.name}"
            time.sleep(0.5)

        workload = os.path.join(tmp, "workload")
        subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-o", workload,
                        os.path.join(ROOT, "testdata/fixtures/workload.c")], check=True)
        procs.append(subprocess.Popen([workload, "spin", "3600"], stdout=subprocess.DEVNULL))

        metrics = f"127.0.0.1:{free_port()}"
        spool = os.path.join(tmp, "spool")
        os.makedirs(spool)
        flags, args, grace, added = podman_args(daemonset(), server_url, metrics, spool,
                                                os.path.join(tmp, "seccomp.json"))
        agent_log = open(os.path.join(tmp, "agent.log"), "w")
        cmd = ["podman", "run", *flags, image, *args]
        print("podman_agent:", " ".join(cmd))
        agent = subprocess.Popen(cmd, stdout=agent_log, stderr=subprocess.STDOUT)

        # The agent's process, seen from the host: its capabilities and mounts.
        pid = 0
        while not pid:
            assert agent.poll() is None, f"the container ended: {open(agent_log.name).read()}"
            assert time.time() < deadline, "the container never started"
            out = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", CONTAINER],
                                 capture_output=True, text=True).stdout.strip()
            pid = int(out) if out.isdigit() else 0
            time.sleep(0.2)
        status = open(f"/proc/{pid}/status").read()
        effective = int(re.search(r"CapEff:\s*([0-9a-f]+)", status).group(1), 16)
        want = sum(1 << CAPABILITIES[c] for c in added)
        assert effective == want, f"CapEff {effective:#x}, the DaemonSet adds {added} ({want:#x})"
        assert re.search(r"NoNewPrivs:\s*1", status), "no_new_privs is not set"
        root = [line.split() for line in open(f"/proc/{pid}/mountinfo") if line.split()[4] == "/"]
        assert root and "ro" in root[0][5].split(","), f"root mount {root}"

        selector = urllib.parse.quote(f'{{node="{NODE}"}}')
        found, metrics_ok = False, False
        while not (found and metrics_ok):
            assert agent.poll() is None, f"the agent ended: {open(agent_log.name).read()}"
            assert time.time() < deadline, (
                f"no samples of {NODE} with spin_hot_loop within {DEADLINE} s "
                f"(metrics answered: {metrics_ok}); agent log: {open(agent_log.name).read()[-3000:]}")
            status, body = get(f"{server_url}/api/v1/flamegraph?selector={selector}&event=cpu&format=folded")
            found = status == 200 and any("spin_hot_loop" in line and "main" in line for line in body.splitlines())
            try:
                metrics_ok = "bimodal_agent" in get(f"http://{metrics}/metrics")[1]
            except OSError:
                pass
            time.sleep(2)

        stopped = subprocess.run(["podman", "stop", "-t", str(grace), CONTAINER], capture_output=True, text=True)
        code = agent.wait(timeout=grace + 30)
        log = open(agent_log.name).read()
        assert stopped.returncode == 0 and code == 0, f"podman stop: {stopped.stderr}; exit {code}; {log[-2000:]}"
        print(json.dumps({"node": NODE, "capabilities": added, "cap_eff": hex(effective),
                          "image": image, "stopped": "exit 0"}))
        print("podman_agent: ok")
    finally:
        subprocess.run(["podman", "rm", "-f", "-i", CONTAINER], capture_output=True)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
