// Command validate checks Kubernetes manifests without a cluster: every document is decoded
// strictly into its Kubernetes API type (k8s.io/api), so an unknown, misspelt, duplicated or
// mistyped field is an error, as `kubectl apply --validate=strict` makes it; then a subset of the
// API server's own checks runs on what was decoded (names, labels, selectors matching their
// templates, mounts of declared volumes, ports and probes).
//
// Usage: validate FILE...   (multi-document YAML; exit status 1 when anything is wrong)
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds are the API types a manifest may hold, by apiVersion and kind.
var kinds = map[string]func() any{
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1/Namespace":                             func() any { return &corev1.Namespace{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"apps/v1/DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/ClusterRole": func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"scheduling.k8s.io/v1/PriorityClass":              func() any { return &schedulingv1.PriorityClass{} },
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: validate FILE...")
		os.Exit(2)
	}
	failed, documents := 0, 0
	for _, path := range os.Args[1:] {
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		problems, n := validateStream(file)
		file.Close()
		documents += n
		for _, p := range problems {
			fmt.Fprintf(os.Stderr, "%s: %s\n", path, p)
		}
		failed += len(problems)
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "validate: %d problem(s) in %d document(s)\n", failed, documents)
		os.Exit(1)
	}
	fmt.Printf("validate: %d document(s) valid\n", documents)
}

// validateStream checks every document of a multi-document YAML stream; it returns the problems
// found (each naming its document) and how many documents it read.
func validateStream(r io.Reader) ([]string, int) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var problems []string
	n := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return problems, n
		}
		if err != nil {
			return append(problems, fmt.Sprintf("document %d: %v", n+1, err)), n
		}
		if isEmpty(doc) {
			continue
		}
		n++
		for _, p := range validateDocument(doc) {
			problems = append(problems, fmt.Sprintf("document %d %s", n, p))
		}
	}
}

// isEmpty says whether a document holds only comments and blank lines (a template that rendered
// to nothing).
func isEmpty(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && string(line) != "---" {
			return false
		}
	}
	return true
}

func validateDocument(doc []byte) []string {
	var header metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &header); err != nil {
		return []string{fmt.Sprintf(": not a Kubernetes object: %v", err)}
	}
	newObject, known := kinds[header.APIVersion+"/"+header.Kind]
	if !known {
		return []string{fmt.Sprintf(": unknown apiVersion/kind %q/%q", header.APIVersion, header.Kind)}
	}
	object := newObject()
	// As the API server decodes: field names match case-sensitively (encoding/json would take
	// `hostPid` for `hostPID`), unknown and duplicated fields are errors, every one reported.
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return []string{fmt.Sprintf("(%s): %v", header.Kind, err)}
	}
	strict, err := kjson.UnmarshalStrict(data, object, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return []string{fmt.Sprintf("(%s): %v", header.Kind, err)}
	}
	if len(strict) > 0 {
		var problems []string
		for _, e := range strict {
			problems = append(problems, fmt.Sprintf("(%s): %v", header.Kind, e))
		}
		return problems
	}
	meta := objectMeta(object)
	where := fmt.Sprintf("(%s %s)", header.Kind, meta.Name)
	var problems []string
	for _, p := range check(object) {
		problems = append(problems, where+": "+p)
	}
	return problems
}

func objectMeta(object any) *metav1.ObjectMeta {
	type hasMeta interface{ GetObjectMeta() metav1.Object }
	if o, ok := object.(hasMeta); ok {
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return &metav1.ObjectMeta{}
}

// check runs the API server's checks this program knows on a decoded object.
func check(object any) []string {
	meta := objectMeta(object)
	var p problems
	p.name("metadata.name", meta.Name, validation.IsDNS1123Subdomain)
	p.labels("metadata.labels", meta.Labels)
	switch o := object.(type) {
	case *appsv1.DaemonSet:
		p.workload(o.Spec.Selector, o.Spec.Template, nil)
	case *appsv1.Deployment:
		p.workload(o.Spec.Selector, o.Spec.Template, nil)
	case *appsv1.StatefulSet:
		// Each claim template is a volume of every pod.
		var claims []string
		for _, c := range o.Spec.VolumeClaimTemplates {
			claims = append(claims, c.Name)
		}
		p.workload(o.Spec.Selector, o.Spec.Template, claims)
		p.name("spec.serviceName", o.Spec.ServiceName, validation.IsDNS1123Label)
	case *corev1.Service:
		p.labels("spec.selector", o.Spec.Selector)
		for i, port := range o.Spec.Ports {
			where := fmt.Sprintf("spec.ports[%d]", i)
			p.port(where+".port", int(port.Port))
			if len(o.Spec.Ports) > 1 || port.Name != "" {
				p.name(where+".name", port.Name, validation.IsDNS1123Label)
			}
		}
	case *policyv1.PodDisruptionBudget:
		if o.Spec.Selector == nil {
			p.add("spec.selector: required")
		}
	case *rbacv1.ClusterRole:
		for i, rule := range o.Rules {
			if len(rule.Verbs) == 0 {
				p.add(fmt.Sprintf("rules[%d].verbs: required", i))
			}
		}
	case *rbacv1.ClusterRoleBinding:
		if o.RoleRef.Kind == "" || o.RoleRef.Name == "" {
			p.add("roleRef: kind and name required")
		}
	}
	return p
}

type problems []string

func (p *problems) add(s string) { *p = append(*p, s) }

func (p *problems) name(field, value string, rule func(string) []string) {
	for _, e := range rule(value) {
		p.add(fmt.Sprintf("%s %q: %s", field, value, e))
	}
}

func (p *problems) labels(field string, set map[string]string) {
	for k, v := range set {
		for _, e := range validation.IsQualifiedName(k) {
			p.add(fmt.Sprintf("%s key %q: %s", field, k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			p.add(fmt.Sprintf("%s[%q] value %q: %s", field, k, v, e))
		}
	}
}

func (p *problems) port(field string, port int) {
	for _, e := range validation.IsValidPortNum(port) {
		p.add(fmt.Sprintf("%s %d: %s", field, port, e))
	}
}

// workload checks a controller's selector against its pod template, and the template's pod.
func (p *problems) workload(selector *metav1.LabelSelector, template corev1.PodTemplateSpec, claims []string) {
	if selector == nil || (len(selector.MatchLabels) == 0 && len(selector.MatchExpressions) == 0) {
		p.add("spec.selector: required and not empty")
	} else if s, err := metav1.LabelSelectorAsSelector(selector); err != nil {
		p.add(fmt.Sprintf("spec.selector: %v", err))
	} else if !s.Matches(labels.Set(template.Labels)) {
		p.add("spec.template.metadata.labels: do not match spec.selector")
	}
	p.labels("spec.template.metadata.labels", template.Labels)
	p.pod("spec.template.spec", &template.Spec, claims)
}

func (p *problems) pod(field string, spec *corev1.PodSpec, claims []string) {
	volumes := map[string]bool{}
	for _, c := range claims {
		volumes[c] = true
	}
	for i, v := range spec.Volumes {
		p.name(fmt.Sprintf("%s.volumes[%d].name", field, i), v.Name, validation.IsDNS1123Label)
		if volumes[v.Name] {
			p.add(fmt.Sprintf("%s.volumes[%d].name %q: duplicate", field, i, v.Name))
		}
		volumes[v.Name] = true
		if sources := countSources(v.VolumeSource); sources != 1 {
			p.add(fmt.Sprintf("%s.volumes[%d] %q: %d volume sources, want exactly 1", field, i, v.Name, sources))
		}
		if v.HostPath != nil && !strings.HasPrefix(v.HostPath.Path, "/") {
			p.add(fmt.Sprintf("%s.volumes[%d].hostPath.path %q: not absolute", field, i, v.HostPath.Path))
		}
	}
	if len(spec.Containers) == 0 {
		p.add(field + ".containers: required")
	}
	for i, c := range spec.Containers {
		where := fmt.Sprintf("%s.containers[%d]", field, i)
		p.name(where+".name", c.Name, validation.IsDNS1123Label)
		if c.Image == "" {
			p.add(where + ".image: required")
		}
		ports := map[string]bool{}
		for j, port := range c.Ports {
			p.port(fmt.Sprintf("%s.ports[%d].containerPort", where, j), int(port.ContainerPort))
			if port.Name != "" {
				p.name(fmt.Sprintf("%s.ports[%d].name", where, j), port.Name, validation.IsValidPortName)
				ports[port.Name] = true
			}
		}
		for j, env := range c.Env {
			p.name(fmt.Sprintf("%s.env[%d].name", where, j), env.Name, validation.IsEnvVarName)
			if env.Value != "" && env.ValueFrom != nil {
				p.add(fmt.Sprintf("%s.env[%d] %q: value and valueFrom both set", where, j, env.Name))
			}
		}
		for j, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				p.add(fmt.Sprintf("%s.volumeMounts[%d]: no volume named %q", where, j, m.Name))
			}
			if !strings.HasPrefix(m.MountPath, "/") {
				p.add(fmt.Sprintf("%s.volumeMounts[%d].mountPath %q: not absolute", where, j, m.MountPath))
			}
		}
		for name, probe := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
			if probe == nil {
				continue
			}
			var port *intstr.IntOrString
			switch {
			case probe.HTTPGet != nil:
				port = &probe.HTTPGet.Port
			case probe.TCPSocket != nil:
				port = &probe.TCPSocket.Port
			}
			if port != nil && port.Type == intstr.String && !ports[port.StrVal] {
				p.add(fmt.Sprintf("%s.%s: no container port named %q", where, name, port.StrVal))
			}
		}
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged &&
			sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			p.add(where + ".securityContext: privileged and allowPrivilegeEscalation=false together")
		}
	}
}

// countSources counts the volume sources set in a volume (the API server wants exactly one).
func countSources(v corev1.VolumeSource) int {
	n := 0
	for _, set := range []bool{v.HostPath != nil, v.EmptyDir != nil, v.Secret != nil, v.ConfigMap != nil,
		v.PersistentVolumeClaim != nil, v.Projected != nil, v.CSI != nil, v.DownwardAPI != nil,
		v.Ephemeral != nil, v.NFS != nil} {
		if set {
			n++
		}
	}
	return n
}
