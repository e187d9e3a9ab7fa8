package main

import (
	"strings"
	"testing"
)

const daemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      hostPID: true
      containers:
        - name: agent
          image: example/agent:1
          ports: [{name: metrics, containerPort: 9464}]
          livenessProbe:
            httpGet: {path: /metrics, port: metrics}
          volumeMounts: [{name: spool, mountPath: /var/lib/spool}]
      volumes:
        - name: spool
          hostPath: {path: /var/lib/spool, type: DirectoryOrCreate}
`

func TestAValidManifestPasses(t *testing.T) {
	problems, n := validateStream(strings.NewReader("# only a comment\n---\n" + daemonSet))
	if len(problems) != 0 || n != 1 {
		t.Fatalf("%d documents, problems: %v", n, problems)
	}
}

// Each mistake is one an operator's `kubectl apply` (strict validation) or the API server
// would refuse; each must be found, with the field it is about.
func TestEachMistakeIsFound(t *testing.T) {
	cases := []struct{ from, to, want string }{
		{"hostPID: true", "hostPid: true", `unknown field "spec.template.spec.hostPid"`},
		{"containerPort: 9464", `containerPort: "9464"`, "containerPort"},
		{"name: spool\n          hostPath", "name: spool2\n          hostPath", `no volume named "spool"`},
		{"matchLabels: {app: agent}", "matchLabels: {app: other}", "do not match spec.selector"},
		{"port: metrics}", "port: metric}", `no container port named "metric"`},
		{"name: agent\nspec", "name: Agent_1\nspec", "metadata.name"},
		{"apiVersion: apps/v1", "apiVersion: apps/v1beta2", "unknown apiVersion/kind"},
		{"hostPID: true", "hostPID: true\n      hostPID: false", `"hostPID" already set`},
		{"path: /var/lib/spool,", "path: var/lib/spool,", "not absolute"},
	}
	for _, c := range cases {
		if !strings.Contains(daemonSet, c.from) {
			t.Fatalf("fixture lacks %q", c.from)
		}
		doc := strings.Replace(daemonSet, c.from, c.to, 1)
		problems, _ := validateStream(strings.NewReader(doc))
		if !strings.Contains(strings.Join(problems, "\n"), c.want) {
			t.Errorf("%q -> %q: want a problem with %q, got %v", c.from, c.to, c.want, problems)
		}
	}
}
